//! Which path reaches the litequeue crate from the user's code.
//!
//! `crate = "..."` wins. Otherwise the package's `Cargo.toml` decides, `lq-runtime`
//! before `lq-core` (both re-export everything the expansion uses), so an
//! application may depend on either one alone, under any renamed key:
//!
//! 1. a crate in plain `[dependencies]` (not optional, not target-specific) is in
//!    every build of the package, so it wins: a producer-only library with `lq-core`
//!    there and `lq-runtime` in `[dev-dependencies]` gets `::lq_core`, which its
//!    library build can reach ([`choose`]);
//! 2. otherwise proc-macro-crate's search, over every dependency table (dev,
//!    optional, target-specific), which also knows the package itself.

use std::path::{Path, PathBuf};

use proc_macro2::{Span, TokenStream};
use proc_macro_crate::{crate_name, FoundCrate};
use quote::{format_ident, quote};
use toml_edit::{DocumentMut, Item};

/// The crates searched, in order of preference.
const CRATES: [&str; 2] = ["lq-runtime", "lq-core"];

/// The path to use for the litequeue crate.
pub(crate) fn resolve(overridden: Option<&syn::Path>) -> syn::Result<TokenStream> {
    if let Some(path) = overridden {
        return Ok(quote!(#path));
    }
    if let Some(name) = from_manifest() {
        let ident = format_ident!("{}", name);
        return Ok(quote!(::#ident));
    }
    for name in CRATES {
        match crate_name(name) {
            // Both crates declare `extern crate self as <name>;`, so the absolute path
            // also works inside the crate itself and its doctests.
            Ok(FoundCrate::Itself) => {
                let ident = format_ident!("{}", name.replace('-', "_"));
                return Ok(quote!(::#ident));
            }
            Ok(FoundCrate::Name(renamed)) => {
                let ident = format_ident!("{}", renamed);
                return Ok(quote!(::#ident));
            }
            Err(_) => continue,
        }
    }
    Err(not_found())
}

/// The error when neither crate is a dependency: what to add, or how to point
/// at a re-export.
fn not_found() -> syn::Error {
    syn::Error::new(
        Span::call_site(),
        "`#[derive(Job)]` cannot find `lq-runtime` or `lq-core` in this package's \
         Cargo.toml: add one of them to [dependencies], or point at a re-export with \
         `#[job(crate = \"path::to::lq\")]`",
    )
}

/// [`choose`] over this package's `Cargo.toml` (and its workspace's, when a plain
/// dependency is inherited from it); `None` when they cannot be read.
fn from_manifest() -> Option<String> {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let manifest = read(&dir.join("Cargo.toml"))?;
    let inherits = plain_dependencies(&manifest).any(|(_, dep)| inherited(dep));
    let workspace = if inherits {
        workspace_manifest(&dir, &manifest)
    } else {
        None
    };
    choose(&manifest, workspace.as_ref())
}

fn read(path: &Path) -> Option<DocumentMut> {
    std::fs::read_to_string(path).ok()?.parse().ok()
}

/// The workspace root's manifest: the one `package.workspace` points at, else the
/// nearest one with a `[workspace]` table, starting at the package's own (as Cargo
/// looks for it).
fn workspace_manifest(dir: &Path, manifest: &DocumentMut) -> Option<DocumentMut> {
    if manifest.get("workspace").is_some() {
        return None; // the package is its own root: `manifest` holds the table
    }
    if let Some(root) = manifest
        .get("package")
        .and_then(|p| p.get("workspace"))
        .and_then(Item::as_str)
    {
        return read(&dir.join(root).join("Cargo.toml"));
    }
    dir.ancestors()
        .skip(1)
        .filter_map(|d| read(&d.join("Cargo.toml")))
        .find(|m| m.get("workspace").is_some())
}

/// The extern crate name (`-` read as `_`) of `lq-runtime`, else `lq-core`, when the
/// package lists it in plain `[dependencies]`: not optional, not only for some
/// targets, not only for tests. A renamed key (`lq = { package = "lq-runtime" }`)
/// gives its key; an inherited one (`lq.workspace = true`) its package from the
/// workspace's `[workspace.dependencies]`, read from `workspace` (the root manifest)
/// or from `manifest` itself when it is the root.
///
/// `None` leaves the choice to proc-macro-crate: when neither crate is there, and
/// when the package is one of the two crates itself.
pub(crate) fn choose(manifest: &DocumentMut, workspace: Option<&DocumentMut>) -> Option<String> {
    let package = manifest
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(Item::as_str);
    if package.is_some_and(|p| CRATES.contains(&p)) {
        return None;
    }
    let workspace_deps = workspace
        .unwrap_or(manifest)
        .get("workspace")
        .and_then(|w| w.get("dependencies"));
    let listed: Vec<(&str, &str)> = plain_dependencies(manifest)
        .filter(|(_, dep)| !dep.get("optional").and_then(Item::as_bool).unwrap_or(false))
        .map(|(key, dep)| {
            let from = if inherited(dep) {
                workspace_deps.and_then(|w| w.get(key)).unwrap_or(dep)
            } else {
                dep
            };
            let package = from.get("package").and_then(Item::as_str).unwrap_or(key);
            (key, package)
        })
        .collect();
    CRATES.iter().find_map(|name| {
        listed
            .iter()
            .find(|(_, package)| package == name)
            .map(|(key, _)| key.replace('-', "_"))
    })
}

/// The `[dependencies]` entries of `manifest`, by key.
fn plain_dependencies(manifest: &DocumentMut) -> impl Iterator<Item = (&str, &Item)> {
    manifest
        .get("dependencies")
        .and_then(Item::as_table_like)
        .into_iter()
        .flat_map(|t| t.iter())
}

/// Whether a dependency entry is `workspace = true`.
fn inherited(dep: &Item) -> bool {
    dep.get("workspace")
        .and_then(Item::as_bool)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    #[test]
    fn override_wins() {
        let path: syn::Path = parse_quote!(my_app::lq);
        assert_eq!(resolve(Some(&path)).unwrap().to_string(), "my_app :: lq");
    }

    #[test]
    fn without_either_crate_none_is_chosen_and_the_error_says_what_to_add() {
        // lq-macros itself has lq-core as a dev-dependency (for its doctests), so
        // its own manifest cannot stand for a package without either crate.
        let m = format!("{PACKAGE}[dependencies]\nserde = \"1\"\n");
        assert_eq!(pick(&m), None);
        let err = not_found().to_string();
        assert!(err.contains("`lq-runtime` or `lq-core`"), "{err}");
        assert!(err.contains("#[job(crate = "), "{err}");
    }

    fn pick(manifest: &str) -> Option<String> {
        choose(&manifest.parse().unwrap(), None)
    }

    fn pick_in(manifest: &str, workspace: &str) -> Option<String> {
        choose(
            &manifest.parse().unwrap(),
            Some(&workspace.parse().unwrap()),
        )
    }

    const PACKAGE: &str = "[package]\nname = \"app\"\n";

    #[test]
    fn a_runtime_for_tests_only_leaves_the_library_on_lq_core() {
        let m = format!(
            "{PACKAGE}[dependencies]\nlq-core = \"0.1\"\n\n\
             [dev-dependencies]\nlq-runtime = \"0.1\"\n"
        );
        assert_eq!(pick(&m).as_deref(), Some("lq_core"));
    }

    #[test]
    fn lq_runtime_wins_when_both_are_dependencies() {
        let m = format!("{PACKAGE}[dependencies]\nlq-core = \"0.1\"\nlq-runtime = \"0.1\"\n");
        assert_eq!(pick(&m).as_deref(), Some("lq_runtime"));
    }

    #[test]
    fn lq_core_alone() {
        let m =
            format!("{PACKAGE}[dependencies]\nserde = \"1\"\nlq-core = {{ version = \"0.1\" }}\n");
        assert_eq!(pick(&m).as_deref(), Some("lq_core"));
    }

    #[test]
    fn a_renamed_dependency_gives_its_key() {
        let m = format!(
            "{PACKAGE}[dependencies]\nlq-core = \"0.1\"\n\
             queue = {{ package = \"lq-runtime\", version = \"0.1\" }}\n"
        );
        assert_eq!(pick(&m).as_deref(), Some("queue"));
        let m =
            format!("{PACKAGE}[dependencies.my-lq]\npackage = \"lq-core\"\nversion = \"0.1\"\n");
        assert_eq!(pick(&m).as_deref(), Some("my_lq"));
    }

    #[test]
    fn optional_and_target_specific_runtimes_are_not_plain() {
        let m = format!(
            "{PACKAGE}[dependencies]\nlq-core = \"0.1\"\n\
             lq-runtime = {{ version = \"0.1\", optional = true }}\n"
        );
        assert_eq!(pick(&m).as_deref(), Some("lq_core"));
        let m = format!(
            "{PACKAGE}[dependencies]\nlq-core = \"0.1\"\n\n\
             [target.'cfg(unix)'.dependencies]\nlq-runtime = \"0.1\"\n"
        );
        assert_eq!(pick(&m).as_deref(), Some("lq_core"));
    }

    #[test]
    fn nothing_plain_leaves_the_choice_to_proc_macro_crate() {
        let m = format!("{PACKAGE}[dev-dependencies]\nlq-runtime = \"0.1\"\n");
        assert_eq!(pick(&m), None);
        let m = format!(
            "{PACKAGE}[dependencies]\nlq-runtime = {{ version = \"0.1\", optional = true }}\n"
        );
        assert_eq!(pick(&m), None);
        assert_eq!(pick(PACKAGE), None);
    }

    #[test]
    fn the_crates_themselves_are_left_to_proc_macro_crate() {
        // lq-runtime depends on lq-core, but inside it the derive names itself.
        let m = "[package]\nname = \"lq-runtime\"\n[dependencies]\nlq-core.workspace = true\n";
        assert_eq!(pick(m), None);
    }

    #[test]
    fn inherited_dependencies_take_their_package_from_the_workspace() {
        let ws = "[workspace]\nmembers = [\"app\"]\n[workspace.dependencies]\n\
                  lq = { package = \"lq-runtime\", path = \"lq-runtime\" }\n\
                  lq-core = { path = \"lq-core\" }\n";
        let m = format!(
            "{PACKAGE}[dependencies]\nlq-core.workspace = true\nlq = {{ workspace = true }}\n"
        );
        assert_eq!(pick_in(&m, ws).as_deref(), Some("lq"));
        let m = format!(
            "{PACKAGE}[dependencies]\nlq-core = {{ workspace = true }}\n\
             [dev-dependencies]\nlq.workspace = true\n"
        );
        assert_eq!(pick_in(&m, ws).as_deref(), Some("lq_core"));
        // Without the workspace manifest an inherited key is read as the package.
        let m = format!("{PACKAGE}[dependencies]\nlq-runtime.workspace = true\n");
        assert_eq!(pick(&m).as_deref(), Some("lq_runtime"));
        // A package that is its own workspace root.
        let m = format!("{PACKAGE}{ws}[dependencies]\nlq.workspace = true\n");
        assert_eq!(pick(&m).as_deref(), Some("lq"));
    }
}
