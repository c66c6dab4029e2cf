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
                quoted(min),
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
                quoted(max),
                d.lit.value()
            ),
        ));
    }
    Ok(d)
}

/// A duration as it is written in `#[job(...)]`, so a message can show a limit the
/// user can copy: `"1s"`, `"1h 30m"`, `"24h"`, `"36500d"`.
///
/// Units are `d h m s ms us ns`, largest first, each one only when not zero. Days
/// appear only from two days up: a user writes a day as `"24h"` (the attribute docs
/// do too), and humantime's `"1day"` is not how anyone writes it.
pub(crate) fn show(d: Duration) -> String {
    const DAY: u64 = 24 * 3600;
    let secs = d.as_secs();
    let (days, rest) = if secs >= 2 * DAY {
        (secs / DAY, secs % DAY)
    } else {
        (0, secs)
    };
    let nanos = d.subsec_nanos();
    let parts = [
        (days, "d"),
        (rest / 3600, "h"),
        (rest % 3600 / 60, "m"),
        (rest % 60, "s"),
        (u64::from(nanos / 1_000_000), "ms"),
        (u64::from(nanos / 1_000 % 1_000), "us"),
        (u64::from(nanos % 1_000), "ns"),
    ];
    let text: Vec<String> = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if text.is_empty() {
        "0s".to_owned()
    } else {
        text.join(" ")
    }
}

/// [`show`] in double quotes, as the string literal to write: `"24h"`.
pub(crate) fn quoted(d: Duration) -> String {
    format!("\"{}\"", show(d))
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
        assert_eq!(
            e.to_string(),
            "`lease` must be at least \"1s\", got \"500ms\""
        );
    }

    #[test]
    fn shows_limits_as_they_are_written() {
        let s = |secs| show(Duration::from_secs(secs));
        assert_eq!(s(1), "1s");
        assert_eq!(s(5400), "1h 30m");
        assert_eq!(s(24 * 3600), "24h");
        assert_eq!(s(100 * 365 * 24 * 3600), "36500d");
        assert_eq!(s(49 * 3600), "2d 1h");
        assert_eq!(s(0), "0s");
        assert_eq!(show(Duration::from_millis(1)), "1ms");
        assert_eq!(show(Duration::from_nanos(1_500)), "1us 500ns");
        assert_eq!(quoted(Duration::from_secs(86_400)), "\"24h\"");
        for secs in [1, 59, 61, 5400, 86_400, 49 * 3600, 3_153_600_000] {
            let d = Duration::from_secs(secs);
            assert_eq!(humantime::parse_duration(&show(d)), Ok(d), "{}", show(d));
        }
        let d = Duration::new(90_061, 2_003_004);
        assert_eq!(humantime::parse_duration(&show(d)), Ok(d), "{}", show(d));
    }

    #[test]
    fn emits_exact_constants() {
        let t = tokens(Duration::from_secs(2)).to_string();
        assert_eq!(t, ":: core :: time :: Duration :: from_millis (2000u64)");
        let t = tokens(Duration::from_nanos(1_500)).to_string();
        assert_eq!(t, ":: core :: time :: Duration :: new (0u64 , 1500u32)");
    }
}
