//! Reading literal values out of `#[job(...)]` expressions, with errors that show the
//! expected form.

use std::fmt::Display;
use std::str::FromStr;

use proc_macro2::Span;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, ExprUnary, Lit, LitStr, UnOp};

/// A string literal, for `key = "..."` (`example` is a valid value, for the message).
pub(crate) fn string(key: &str, example: &str, value: &Expr) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s.clone()),
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`{key}` must be a string literal, like `{key} = \"{example}\"`"),
        )),
    }
}

/// An integer literal, possibly negative, converted to `T`.
///
/// `range` describes the accepted values for the message; `example` is one of them.
pub(crate) fn int<T>(key: &str, range: &str, example: &str, value: &Expr) -> syn::Result<(T, Span)>
where
    T: FromStr,
    T::Err: Display,
{
    let (negative, lit) = match value {
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => (true, &**expr),
        other => (false, other),
    };
    let Expr::Lit(ExprLit {
        lit: Lit::Int(int), ..
    }) = lit
    else {
        return Err(syn::Error::new_spanned(
            value,
            format!("`{key}` must be an integer in {range}, like `{key} = {example}`"),
        ));
    };
    let digits = format!("{}{}", if negative { "-" } else { "" }, int.base10_digits());
    digits.parse::<T>().map(|v| (v, value.span())).map_err(|_| {
        syn::Error::new_spanned(value, format!("`{key}` must be in {range}, got {digits}"))
    })
}

/// A number literal (float or integer) as `f64`.
pub(crate) fn float(key: &str, example: &str, value: &Expr) -> syn::Result<(f64, Span)> {
    let (negative, lit) = match value {
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => (true, &**expr),
        other => (false, other),
    };
    let parsed = match lit {
        Expr::Lit(ExprLit {
            lit: Lit::Float(f), ..
        }) => f.base10_parse::<f64>(),
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i.base10_parse::<f64>(),
        _ => Err(syn::Error::new(Span::call_site(), "")),
    };
    match parsed {
        Ok(v) => Ok((if negative { -v } else { v }, value.span())),
        Err(_) => Err(syn::Error::new_spanned(
            value,
            format!("`{key}` must be a number, like `{key} = {example}`"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    #[test]
    fn reads_integers_with_sign_and_range() {
        assert_eq!(
            int::<i16>("p", "-32768..=32767", "10", &parse_quote!(-5))
                .unwrap()
                .0,
            -5
        );
        assert_eq!(
            int::<u32>("m", "1..", "5", &parse_quote!(7u32)).unwrap().0,
            7
        );
        let e = int::<i16>("priority", "-32768..=32767", "10", &parse_quote!(40000)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`priority` must be in -32768..=32767, got 40000"
        );
        let e = int::<i16>("priority", "-32768..=32767", "10", &parse_quote!("10")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`priority` must be an integer in -32768..=32767, like `priority = 10`"
        );
    }

    #[test]
    fn reads_floats_and_strings() {
        assert_eq!(float("jitter", "0.1", &parse_quote!(0.25)).unwrap().0, 0.25);
        assert_eq!(float("jitter", "0.1", &parse_quote!(1)).unwrap().0, 1.0);
        assert_eq!(float("jitter", "0.1", &parse_quote!(-0.5)).unwrap().0, -0.5);
        assert!(float("jitter", "0.1", &parse_quote!("x")).is_err());
        assert_eq!(
            string("queue", "emails", &parse_quote!("q"))
                .unwrap()
                .value(),
            "q"
        );
        let e = string("queue", "emails", &parse_quote!(emails)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`queue` must be a string literal, like `queue = \"emails\"`"
        );
    }
}
