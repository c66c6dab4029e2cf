//! Which path reaches the litequeue crate from the user's code.
//!
//! `crate = "..."` wins; otherwise the package's `Cargo.toml` is searched for
//! `lq-runtime`, then `lq-core` (both re-export everything the expansion uses), so an
//! application may depend on either one alone, under any renamed key.

use proc_macro2::{Span, TokenStream};
use proc_macro_crate::{crate_name, FoundCrate};
use quote::{format_ident, quote};

/// The crates searched, in order of preference.
const CRATES: [&str; 2] = ["lq-runtime", "lq-core"];

/// The path to use for the litequeue crate.
pub(crate) fn resolve(overridden: Option<&syn::Path>) -> syn::Result<TokenStream> {
    if let Some(path) = overridden {
        return Ok(quote!(#path));
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
    Err(syn::Error::new(
        Span::call_site(),
        "`#[derive(Job)]` cannot find `lq-runtime` or `lq-core` in this package's \
         Cargo.toml: add one of them to [dependencies], or point at a re-export with \
         `#[job(crate = \"path::to::lq\")]`",
    ))
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
    fn without_either_crate_the_error_says_what_to_add() {
        // lq-macros itself depends on neither (the integration and UI tests, which
        // depend on lq-runtime, cover finding it).
        let err = resolve(None).unwrap_err().to_string();
        assert!(err.contains("`lq-runtime` or `lq-core`"), "{err}");
        assert!(err.contains("#[job(crate = "), "{err}");
    }
}
