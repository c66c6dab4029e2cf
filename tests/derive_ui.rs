//! Compile tests for `#[derive(Job)]`: each `ui/fail_*.rs` holds one mistake and its
//! `.stderr` the message the user sees; each `ui/pass_*.rs` must compile and run.
//!
//! Regenerate the expected output after changing a message with
//! `TRYBUILD=overwrite cargo test -p lq-tests --test derive_ui`, then read it.

#[test]
fn derive_errors_read_well() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/fail_*.rs");
    t.pass("ui/pass_*.rs");
}
