//! Reads every `#[job(...)]` attribute into raw `key = value` entries with spans.
//!
//! Several `#[job]` attributes merge into one list. This layer only checks the
//! syntax, the key names and duplicates; `valid` interprets each value.

use proc_macro2::Span;
use syn::ext::IdentExt as _;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Attribute, Expr, Ident, Meta, Token};

use crate::diag::{backticked, did_you_mean, Errors};

/// Every key `#[job(...)]` accepts, in documentation order.
pub(crate) const KEYS: &[&str] = &[
    "kind",
    "queue",
    "priority",
    "max_attempts",
    "backoff",
    "unique_key",
    "timeout",
    "lease",
    "cron",
    "cron_tz",
    "cron_catch_up",
    "crate",
];

/// One `key = value` pair.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The key, without a raw `r#` prefix (`crate` is a keyword).
    pub(crate) key: String,
    /// Where the key is written.
    pub(crate) key_span: Span,
    /// The value, as an expression; `valid` decides what it must be.
    pub(crate) value: Expr,
}

impl Parse for Entry {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let ident = Ident::parse_any(input)?;
        let key = ident.unraw().to_string();
        if !input.peek(Token![=]) {
            return Err(syn::Error::new(
                ident.span(),
                format!("`{key}` needs a value: write `{key} = ...`"),
            ));
        }
        input.parse::<Token![=]>()?;
        let value = input.parse()?;
        Ok(Self {
            key,
            key_span: ident.span(),
            value,
        })
    }
}

/// The merged entries of every `#[job(...)]` on the type.
#[derive(Debug, Clone, Default)]
pub(crate) struct Entries(pub(crate) Vec<Entry>);

impl Entries {
    /// Reads the `#[job]` attributes in `attrs`, reporting every mistake found.
    pub(crate) fn from_attrs(attrs: &[Attribute]) -> syn::Result<Self> {
        let mut errors = Errors::default();
        let mut entries: Vec<Entry> = Vec::new();
        for attr in attrs.iter().filter(|a| a.path().is_ident("job")) {
            let Meta::List(list) = &attr.meta else {
                errors.at(
                    attr.meta.span(),
                    "write the settings in parentheses: `#[job(queue = \"emails\", ...)]`",
                );
                continue;
            };
            let Some(parsed) =
                errors.ok(list.parse_args_with(Punctuated::<Entry, Token![,]>::parse_terminated))
            else {
                continue;
            };
            for entry in parsed {
                if !KEYS.contains(&entry.key.as_str()) {
                    errors.at(entry.key_span, unknown_key(&entry.key));
                } else if entries.iter().any(|e| e.key == entry.key) {
                    errors.at(
                        entry.key_span,
                        format!("duplicate `{}`: remove one", entry.key),
                    );
                } else {
                    entries.push(entry);
                }
            }
        }
        errors.finish(Self(entries))
    }

    /// Removes and returns the entry for `key`.
    pub(crate) fn take(&mut self, key: &str) -> Option<Entry> {
        let at = self.0.iter().position(|e| e.key == key)?;
        Some(self.0.remove(at))
    }
}

fn unknown_key(key: &str) -> String {
    format!(
        "unknown key `{key}` in `#[job(...)]`: {}valid keys are {}",
        did_you_mean(key, KEYS.iter().copied()),
        backticked(KEYS.iter().copied())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn read(attrs: Vec<Attribute>) -> Result<Vec<String>, String> {
        Entries::from_attrs(&attrs)
            .map(|e| e.0.into_iter().map(|e| e.key).collect())
            .map_err(|e| {
                e.into_iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
    }

    #[test]
    fn merges_several_attributes_and_keeps_crate_keyword() {
        let keys = read(vec![
            parse_quote!(#[job(queue = "a", priority = -1,)]),
            parse_quote!(#[doc = "ignored"]),
            parse_quote!(#[job(crate = "x", backoff = exponential(base = "1s"))]),
        ]);
        assert_eq!(keys.unwrap(), ["queue", "priority", "crate", "backoff"]);
    }

    #[test]
    fn rejects_unknown_and_duplicate_keys() {
        let e = read(vec![parse_quote!(#[job(queu = "a")])]).unwrap_err();
        assert!(
            e.starts_with(
                "unknown key `queu` in `#[job(...)]`: did you mean `queue`? valid keys are `kind`"
            ),
            "{e}"
        );
        let e = read(vec![
            parse_quote!(#[job(queue = "a")]),
            parse_quote!(#[job(queue = "b")]),
        ])
        .unwrap_err();
        assert_eq!(e, "duplicate `queue`: remove one");
    }

    #[test]
    fn rejects_bad_syntax() {
        let e = read(vec![parse_quote!(#[job])]).unwrap_err();
        assert!(e.contains("in parentheses"), "{e}");
        let e = read(vec![parse_quote!(#[job(queue)])]).unwrap_err();
        assert_eq!(e, "`queue` needs a value: write `queue = ...`");
    }

    #[test]
    fn reports_every_mistake() {
        let e = read(vec![parse_quote!(#[job(a = 1, b = 2)])]).unwrap_err();
        assert_eq!(e.lines().count(), 2, "{e}");
    }
}
