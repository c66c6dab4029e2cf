//! Compile tests for `#[derive(Job)]`: each `ui/fail_*.rs` holds one mistake and its
//! `.stderr` the message the user sees. The programs that must compile and run
//! are test targets of their own (`derive_pass/`): with no passing case here,
//! trybuild only type-checks, and its separate build of the dependencies costs
//! no code generation.
//!
//! Regenerate the expected output after changing a message with
//! `TRYBUILD=overwrite cargo test -p lq-tests --test derive_ui`, then read it.

#[test]
fn derive_errors_read_well() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/fail_*.rs");
}
