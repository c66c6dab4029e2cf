//! The `backoff = ...` value: a built-in policy with named arguments, or a function.

use std::time::Duration;

use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprAssign, ExprCall, ExprPath, Token};

use crate::diag::{backticked, did_you_mean, Errors};
use crate::{duration, lit};

/// The policies written out, for messages.
const FORMS: &str = "use `exponential(base = \"1s\", max = \"1h\", jitter = 0.1)`, \
                     `fixed(\"30s\")`, `linear(step = \"10s\", max = \"10m\")`, \
                     or a path to a `fn(u32) -> Duration`";

/// Default `base` of `exponential(...)`.
const BASE: Duration = Duration::from_secs(1);
/// Default `max` of `exponential(...)` and `linear(...)`.
const MAX: Duration = Duration::from_secs(3600);
/// Default `jitter` of `exponential(...)`.
const JITTER: f64 = 0.1;

/// A validated retry policy.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BackoffSpec {
    /// No `backoff` key: `Backoff::DEFAULT`.
    Default,
    /// `exponential(base = .., max = .., jitter = ..)`.
    Exponential {
        /// First delay.
        base: Duration,
        /// Cap.
        max: Duration,
        /// Spread, `0.0..=1.0`.
        jitter: f64,
    },
    /// `fixed("30s")`.
    Fixed(Duration),
    /// `linear(step = .., max = ..)`.
    Linear {
        /// Growth per attempt.
        step: Duration,
        /// Cap.
        max: Duration,
    },
    /// A path to a user function.
    Custom(syn::Path),
}

/// Reads the value of `backoff = ...`.
pub(crate) fn parse(value: &Expr) -> syn::Result<BackoffSpec> {
    match value {
        Expr::Call(ExprCall { func, args, .. }) => {
            let name = match &**func {
                Expr::Path(ExprPath { path, .. }) => path.get_ident().map(|i| i.to_string()),
                _ => None,
            };
            match name.as_deref() {
                Some("exponential") => exponential(args),
                Some("fixed") => fixed(func, args),
                Some("linear") => linear(func, args),
                Some(other) => Err(syn::Error::new_spanned(
                    func,
                    format!(
                        "unknown backoff `{other}`: {}{FORMS}",
                        did_you_mean(other, ["exponential", "fixed", "linear"])
                    ),
                )),
                None => Err(syn::Error::new_spanned(
                    func,
                    format!("unknown backoff: {FORMS}"),
                )),
            }
        }
        Expr::Path(ExprPath {
            path, qself: None, ..
        }) => match path.get_ident() {
            Some(i) if i == "exponential" => exponential(&Punctuated::new()),
            Some(i) if i == "fixed" || i == "linear" => Err(syn::Error::new_spanned(
                i,
                format!("`{i}` needs arguments: {FORMS}"),
            )),
            _ => Ok(BackoffSpec::Custom(path.clone())),
        },
        _ => Err(syn::Error::new_spanned(
            value,
            format!("`backoff` has the wrong form: {FORMS}"),
        )),
    }
}

/// Named arguments `name = value`, checked against `allowed`.
fn named<'a>(
    policy: &str,
    allowed: &[&str],
    args: &'a Punctuated<Expr, Token![,]>,
) -> syn::Result<Vec<(String, &'a Expr)>> {
    let mut errors = Errors::default();
    let mut out: Vec<(String, &Expr)> = Vec::new();
    for arg in args {
        let Expr::Assign(ExprAssign { left, right, .. }) = arg else {
            errors.at(
                arg.span(),
                format!("name the arguments of `{policy}(...)`: {}", example(policy)),
            );
            continue;
        };
        let name = match &**left {
            Expr::Path(ExprPath { path, .. }) => path.get_ident().map(|i| i.to_string()),
            _ => None,
        };
        match name {
            Some(n) if !allowed.contains(&n.as_str()) => errors.at(
                left.span(),
                format!(
                    "unknown argument `{n}` of `{policy}(...)`: {}its arguments are {}",
                    did_you_mean(&n, allowed.iter().copied()),
                    backticked(allowed.iter().copied())
                ),
            ),
            Some(n) if out.iter().any(|(m, _)| *m == n) => {
                errors.at(left.span(), format!("duplicate `{n}`: remove one"))
            }
            Some(n) => out.push((n, &**right)),
            None => errors.at(
                left.span(),
                format!("expected an argument name: {}", example(policy)),
            ),
        }
    }
    errors.finish(out)
}

fn example(policy: &str) -> &'static str {
    match policy {
        "linear" => "`linear(step = \"10s\", max = \"10m\")`",
        _ => "`exponential(base = \"1s\", max = \"1h\", jitter = 0.1)`",
    }
}

fn exponential(args: &Punctuated<Expr, Token![,]>) -> syn::Result<BackoffSpec> {
    let (mut base, mut max, mut jitter) = (BASE, MAX, JITTER);
    let mut errors = Errors::default();
    let mut max_span = None;
    for (name, value) in named("exponential", &["base", "max", "jitter"], args)? {
        match name.as_str() {
            "base" => {
                base = errors
                    .ok(duration::parse("base", value))
                    .map_or(base, |d| d.value)
            }
            "max" => {
                max_span = Some(value.span());
                max = errors
                    .ok(duration::parse("max", value))
                    .map_or(max, |d| d.value);
            }
            _ => {
                if let Some((v, span)) = errors.ok(lit::float("jitter", "0.1", value)) {
                    if (0.0..=1.0).contains(&v) {
                        jitter = v;
                    } else {
                        errors.at(
                            span,
                            format!(
                                "`jitter` is a fraction of the delay and must be within \
                                 0.0..=1.0 (0.1 spreads delays by ±10 %), got {v}"
                            ),
                        );
                    }
                }
            }
        }
    }
    if max < base {
        let span = max_span.unwrap_or_else(|| args.span());
        errors.at(span, cap_message("base", base, max));
    }
    errors.finish(BackoffSpec::Exponential { base, max, jitter })
}

fn linear(func: &Expr, args: &Punctuated<Expr, Token![,]>) -> syn::Result<BackoffSpec> {
    let mut errors = Errors::default();
    let (mut step, mut max, mut max_span) = (None, MAX, None);
    for (name, value) in named("linear", &["step", "max"], args)? {
        let parsed = errors.ok(duration::parse(&name, value)).map(|d| d.value);
        match name.as_str() {
            "step" => step = parsed.or(Some(Duration::ZERO)),
            _ => {
                max_span = Some(value.span());
                max = parsed.unwrap_or(MAX);
            }
        }
    }
    let Some(step) = step else {
        errors.at(
            func.span(),
            format!("`linear` needs a `step`: {}", example("linear")),
        );
        return errors.finish(BackoffSpec::Default);
    };
    if max < step {
        errors.at(
            max_span.unwrap_or_else(|| args.span()),
            cap_message("step", step, max),
        );
    }
    errors.finish(BackoffSpec::Linear { step, max })
}

fn fixed(func: &Expr, args: &Punctuated<Expr, Token![,]>) -> syn::Result<BackoffSpec> {
    let mut iter = args.iter();
    match (iter.next(), iter.next()) {
        (Some(delay), None) if !matches!(delay, Expr::Assign(_)) => {
            Ok(BackoffSpec::Fixed(duration::parse("fixed", delay)?.value))
        }
        _ => Err(syn::Error::new_spanned(
            func,
            "`fixed` takes one delay: write `fixed(\"30s\")`",
        )),
    }
}

fn cap_message(first: &str, value: Duration, max: Duration) -> String {
    format!(
        "`max` ({}) is shorter than `{first}` ({}): raise `max` or lower `{first}`",
        duration::show(max),
        duration::show(value)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn err(e: Expr) -> String {
        parse(&e)
            .unwrap_err()
            .into_iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn exponential_fills_defaults() {
        let s = |base, max, jitter| BackoffSpec::Exponential {
            base: Duration::from_secs(base),
            max: Duration::from_secs(max),
            jitter,
        };
        assert_eq!(parse(&parse_quote!(exponential)).unwrap(), s(1, 3600, 0.1));
        assert_eq!(
            parse(&parse_quote!(exponential())).unwrap(),
            s(1, 3600, 0.1)
        );
        assert_eq!(
            parse(&parse_quote!(exponential(base = "2s", jitter = 0))).unwrap(),
            s(2, 3600, 0.0)
        );
        assert_eq!(
            parse(&parse_quote!(exponential(
                max = "1m",
                base = "5s",
                jitter = 1.0
            )))
            .unwrap(),
            s(5, 60, 1.0)
        );
    }

    #[test]
    fn fixed_linear_and_custom() {
        assert_eq!(
            parse(&parse_quote!(fixed("30s"))).unwrap(),
            BackoffSpec::Fixed(Duration::from_secs(30))
        );
        let l = BackoffSpec::Linear {
            step: Duration::from_secs(10),
            max: Duration::from_secs(600),
        };
        assert_eq!(
            parse(&parse_quote!(linear(step = "10s", max = "10m"))).unwrap(),
            l
        );
        assert_eq!(
            parse(&parse_quote!(crate::retry::slow)).unwrap(),
            BackoffSpec::Custom(parse_quote!(crate::retry::slow))
        );
    }

    #[test]
    fn explains_mistakes() {
        assert!(err(parse_quote!(exponentail(base = "1s"))).starts_with(
            "unknown backoff `exponentail`: did you mean `exponential`? use `exponential("
        ));
        assert!(err(parse_quote!(exponential(jitter = 1.5)))
            .starts_with("`jitter` is a fraction of the delay and must be within 0.0..=1.0"));
        assert!(err(parse_quote!(exponential(bse = "1s")))
            .starts_with("unknown argument `bse` of `exponential(...)`: did you mean `base`?"));
        assert!(err(parse_quote!(exponential("1s")))
            .starts_with("name the arguments of `exponential(...)`"));
        assert_eq!(
            err(parse_quote!(exponential(base = "2m", max = "1m"))),
            "`max` (1m) is shorter than `base` (2m): raise `max` or lower `base`"
        );
        assert_eq!(
            err(parse_quote!(fixed())),
            "`fixed` takes one delay: write `fixed(\"30s\")`"
        );
        assert!(err(parse_quote!(linear(max = "1m"))).starts_with("`linear` needs a `step`"));
        assert!(err(parse_quote!("fixed")).starts_with("`backoff` has the wrong form: use"));
        assert!(err(parse_quote!(fixed)).starts_with("`fixed` needs arguments"));
        assert_eq!(
            err(parse_quote!(exponential(base = "x", jitter = 2)))
                .lines()
                .count(),
            2
        );
    }
}
