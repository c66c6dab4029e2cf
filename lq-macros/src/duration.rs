//! Durations written as strings in `#[job(...)]`: `"30s"`, `"5m"`, `"1h 30m"`.

use std::time::Duration;

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Expr, ExprLit, Lit, LitStr};

/// The forms a duration may take, for error messages.
pub(crate) const FORMS: &str =
    "write a number and a unit in a string, like \"500ms\", \"30s\", \"5m\" or \"1h 30m\"";

/// A duration parsed from a string literal, with the literal for error spans.
#[derive(Debug, Clone)]
pub(crate) struct Spanned {
    /// The parsed value.
    pub(crate) value: Duration,
    /// The literal it was written as.
    pub(crate) lit: LitStr,
}

/// Parses `value`, which must be a string literal holding a duration, for `what`.
pub(crate) fn parse(what: &str, value: &Expr) -> syn::Result<Spanned> {
    let Expr::Lit(ExprLit {
        lit: Lit::Str(lit), ..
    }) = value
    else {
        return Err(syn::Error::new_spanned(
            value,
            format!("`{what}` must be a duration string: {FORMS}"),
        ));
    };
    let text = lit.value();
    match humantime::parse_duration(text.trim()) {
        Ok(d) => Ok(Spanned {
            value: d,
            lit: lit.clone(),
        }),
        Err(e) => Err(syn::Error::new(
            lit.span(),
            format!("invalid duration {text:?} for `{what}` ({e}): {FORMS}"),
        )),
    }
}

/// Parses `value` as a duration of at least `min`.
pub(crate) fn parse_at_least(what: &str, value: &Expr, min: Duration) -> syn::Result<Spanned> {
    let d = parse(what, value)?;
    if d.value < min {
        return Err(syn::Error::new(
            d.lit.span(),
            format!(
                "`{what}` must be at least {}, got {:?}",
                show(min),
                d.lit.value()
            ),
        ));
    }
    Ok(d)
}

/// Parses `value` as a duration of at least `min` and at most `max`; `why_max`
/// says why the bound is there.
pub(crate) fn parse_between(
    what: &str,
    value: &Expr,
    min: Duration,
    max: Duration,
    why_max: &str,
) -> syn::Result<Spanned> {
    let d = parse_at_least(what, value, min)?;
    if d.value > max {
        return Err(syn::Error::new(
            d.lit.span(),
            format!(
                "`{what}` must be at most {}, got {:?}: {why_max}",
                show(max),
                d.lit.value()
            ),
        ));
    }
    Ok(d)
}

/// A duration as humans write it: `1s`, `1h 30m`.
pub(crate) fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// A `::core::time::Duration` constant expression for `d`.
pub(crate) fn tokens(d: Duration) -> TokenStream {
    match u64::try_from(d.as_millis()) {
        Ok(ms) if d.subsec_nanos().is_multiple_of(1_000_000) => {
            quote!(::core::time::Duration::from_millis(#ms))
        }
        _ => {
            let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
            quote!(::core::time::Duration::new(#secs, #nanos))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn ok(e: Expr) -> Duration {
        parse("timeout", &e).unwrap().value
    }

    fn err(e: Expr) -> String {
        parse("timeout", &e).unwrap_err().to_string()
    }

    #[test]
    fn parses_human_durations() {
        assert_eq!(ok(parse_quote!("30s")), Duration::from_secs(30));
        assert_eq!(ok(parse_quote!("5m")), Duration::from_secs(300));
        assert_eq!(ok(parse_quote!("1h 30m")), Duration::from_secs(5400));
        assert_eq!(ok(parse_quote!(" 250ms ")), Duration::from_millis(250));
    }

    #[test]
    fn explains_the_valid_forms() {
        let e = err(parse_quote!("30 parsecs"));
        assert!(
            e.starts_with("invalid duration \"30 parsecs\" for `timeout` ("),
            "{e}"
        );
        assert!(e.ends_with(FORMS), "{e}");
        assert_eq!(
            err(parse_quote!(30)),
            format!("`timeout` must be a duration string: {FORMS}")
        );
    }

    #[test]
    fn enforces_minimum() {
        let e =
            parse_at_least("lease", &parse_quote!("500ms"), Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.to_string(), "`lease` must be at least 1s, got \"500ms\"");
    }

    #[test]
    fn emits_exact_constants() {
        let t = tokens(Duration::from_secs(2)).to_string();
        assert_eq!(t, ":: core :: time :: Duration :: from_millis (2000u64)");
        let t = tokens(Duration::from_nanos(1_500)).to_string();
        assert_eq!(t, ":: core :: time :: Duration :: new (0u64 , 1500u32)");
    }
}
