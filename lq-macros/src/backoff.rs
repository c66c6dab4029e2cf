//! The `backoff = ...` value: a built-in policy with named arguments, or a function.

use std::time::Duration;

use proc_macro2::Span;
use quote::ToTokens as _;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprAssign, ExprCall, ExprLit, ExprPath, Lit, LitStr, Token};

use crate::diag::{backticked, closest, did_you_mean, distance, Errors};
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
/// Longest delay written in a policy: a hundred years of 365 days, as the runtime's
/// `MOST_DELAY` (lq-runtime's `attempt.rs`), which caps every retry's delay.
const MOST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

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
                        did_you_mean(other, POLICIES)
                    ),
                )),
                None => {
                    let path = func.to_token_stream().to_string().replace(' ', "");
                    Err(syn::Error::new_spanned(
                        func,
                        format!(
                            "unknown backoff `{path}(...)`: write a built-in policy by its bare \
                             name, like `exponential(...)`, and name a function of yours \
                             without calling it, like `backoff = {path}`"
                        ),
                    ))
                }
            }
        }
        Expr::Path(ExprPath {
            path, qself: None, ..
        }) => match path.get_ident() {
            Some(i) if i == "exponential" => exponential(&Punctuated::new()),
            Some(i) if i == "fixed" || i == "linear" => Err(syn::Error::new_spanned(
                i,
                format!("`{i}` needs arguments: write {}", example(&i.to_string())),
            )),
            Some(i) => match misspelled(&i.to_string()) {
                Some(policy) => Err(syn::Error::new_spanned(
                    i,
                    format!(
                        "unknown backoff `{i}`: did you mean `{policy}`? {FORMS} (if `{i}` is \
                         a function of yours, write `self::{i}`)"
                    ),
                )),
                None => Ok(BackoffSpec::Custom(path.clone())),
            },
            None => Ok(BackoffSpec::Custom(path.clone())),
        },
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Err(string(text).unwrap_or_else(|| wrong_form(value))),
        _ => Err(wrong_form(value)),
    }
}

/// The error for a `backoff` of no form it takes.
fn wrong_form(value: &Expr) -> syn::Error {
    syn::Error::new_spanned(value, format!("`backoff` has the wrong form: {FORMS}"))
}

/// The error for a string that reads as what the user meant: a bare duration
/// (`"30s"`), or a policy in quotes (`"exponential"`, or a misspelling of one).
fn string(text: &LitStr) -> Option<syn::Error> {
    let word = text.value();
    let word = word.trim();
    if humantime::parse_duration(word).is_ok() {
        return Some(syn::Error::new(
            text.span(),
            format!(
                "`backoff` takes a policy, not a bare duration: write `fixed({word:?})` to wait \
                 that long after every failure, or `exponential(base = {word:?})` for delays \
                 that grow from it"
            ),
        ));
    }
    let (policy, hint) = match POLICIES.into_iter().find(|p| *p == word) {
        Some(policy) => (policy, String::new()),
        None => {
            let policy = misspelled(word)?;
            (policy, format!("did you mean `{policy}`? "))
        }
    };
    Some(syn::Error::new(
        text.span(),
        format!(
            "`backoff` takes a policy, not a string: {hint}write it without quotes, like \
             `backoff = {}`",
            example(policy).trim_matches('`')
        ),
    ))
}

/// The built-in policies.
const POLICIES: [&str; 3] = ["exponential", "fixed", "linear"];

/// The policy a bare name that is not one most likely misspells: one edit away or
/// two letters swapped (two edits for `exponential`), not the policy extended and
/// not a raw identifier, so
/// that a function of the user's own called `linear_ms`, `fixed2` or `r#fixed` is
/// taken as the path it is (a misspelling gets a did-you-mean instead of rustc's
/// "cannot find value").
fn misspelled(word: &str) -> Option<&'static str> {
    if word.starts_with("r#") {
        return None; // a raw identifier is written on purpose
    }
    let word = word.to_lowercase();
    let policy = closest(&word, POLICIES)?;
    // Two edits for `exponential`; for the short names one, or two letters
    // swapped, so that a function of the user's own such as `linger` is not
    // taken for one.
    let d = distance(&word, policy);
    let near = d <= 1 || (d == 2 && (policy.len() > 6 || swapped(&word, policy)));
    (near && !word.starts_with(policy)).then_some(policy)
}

/// Whether `a` is `b` with two neighbouring letters swapped (`linaer`).
fn swapped(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len() != b.len() {
        return false;
    }
    let differ: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
    matches!(differ[..], [i, j] if j == i + 1 && a[i] == b[j] && a[j] == b[i])
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
        "fixed" => "`fixed(\"30s\")`",
        _ => "`exponential(base = \"1s\", max = \"1h\", jitter = 0.1)`",
    }
}

fn exponential(args: &Punctuated<Expr, Token![,]>) -> syn::Result<BackoffSpec> {
    let (mut base, mut max, mut jitter) = (BASE, MAX, JITTER);
    let mut errors = Errors::default();
    let (mut base_span, mut max_span, mut compare) = (None, None, true);
    for (name, value) in named("exponential", &["base", "max", "jitter"], args)? {
        match name.as_str() {
            "base" => match errors.ok(growth("exponential", "base", value)) {
                Some(d) => (base, base_span) = (d.value, Some(d.lit.span())),
                None => compare = false,
            },
            "max" => match errors.ok(delay("max", value)) {
                Some(d) => (max, max_span) = (d.value, Some(d.lit.span())),
                None => compare = false,
            },
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
    if compare {
        let first = ("base", base, base_span);
        errors.ok(check_max("exponential", first, (max, max_span), args));
    }
    errors.finish(BackoffSpec::Exponential { base, max, jitter })
}

fn linear(func: &Expr, args: &Punctuated<Expr, Token![,]>) -> syn::Result<BackoffSpec> {
    let mut errors = Errors::default();
    let (mut step, mut step_span, mut max, mut max_span) = (None, None, MAX, None);
    let mut compare = true;
    for (name, value) in named("linear", &["step", "max"], args)? {
        if name == "step" {
            // A bad `step` is still a `step`: no "needs a `step`" on top of its error.
            step = Some(Duration::ZERO);
            match errors.ok(growth("linear", "step", value)) {
                Some(d) => (step, step_span) = (Some(d.value), Some(d.lit.span())),
                None => compare = false,
            }
        } else {
            match errors.ok(delay("max", value)) {
                Some(d) => (max, max_span) = (d.value, Some(d.lit.span())),
                None => compare = false,
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
    if compare {
        errors.ok(check_max(
            "linear",
            ("step", step, step_span),
            (max, max_span),
            args,
        ));
    }
    errors.finish(BackoffSpec::Linear { step, max })
}

fn fixed(func: &Expr, args: &Punctuated<Expr, Token![,]>) -> syn::Result<BackoffSpec> {
    let mut iter = args.iter();
    match (iter.next(), iter.next()) {
        (Some(d), None) if !matches!(d, Expr::Assign(_)) => {
            Ok(BackoffSpec::Fixed(delay("fixed", d)?.value))
        }
        _ => Err(syn::Error::new_spanned(
            func,
            "`fixed` takes one delay: write `fixed(\"30s\")`",
        )),
    }
}

/// A delay written in a policy: a duration string of at most [`MOST`].
fn delay(what: &str, value: &Expr) -> syn::Result<duration::Spanned> {
    let d = duration::parse(what, value)?;
    if d.value > MOST {
        return Err(syn::Error::new(
            d.lit.span(),
            format!(
                "`{what}` must be at most {} (a hundred years of 365 days, the longest the \
                 runtime puts off a retry), got {:?}",
                duration::quoted(MOST),
                d.lit.value()
            ),
        ));
    }
    Ok(d)
}

/// The delay a policy grows by (`base` of `exponential`, `step` of `linear`): a
/// [`delay`] above zero, else every retry would run at once.
fn growth(policy: &str, what: &str, value: &Expr) -> syn::Result<duration::Spanned> {
    let d = delay(what, value)?;
    if d.value.is_zero() {
        let (times, like) = match policy {
            "linear" => ("the attempt", "\"10s\""),
            _ => ("2^(attempt-1)", "\"1s\""),
        };
        return Err(syn::Error::new(
            d.lit.span(),
            format!(
                "`{what} = {:?}` makes every retry of `{policy}(...)` run at once (0 times \
                 {times} is 0): give a `{what}` above zero, like `{what} = {like}`, or write \
                 `fixed(\"0s\")` if immediate retries are what you want",
                d.lit.value()
            ),
        ));
    }
    Ok(d)
}

/// `max` must not be shorter than the first delay, `first` (`base` or `step`, with
/// its value and where it is written). When `max` is not written (`max.1` is `None`)
/// the default [`MAX`] applies, and the error is at `first`, which then is written.
fn check_max(
    policy: &str,
    (first, value, first_span): (&str, Duration, Option<Span>),
    (max, max_span): (Duration, Option<Span>),
    args: &Punctuated<Expr, Token![,]>,
) -> syn::Result<()> {
    if max >= value {
        return Ok(());
    }
    let (value, max) = (duration::quoted(value), duration::quoted(max));
    let (span, message) = match max_span {
        Some(span) => (
            span,
            format!(
                "`max = {max}` is shorter than `{first} = {value}`: raise `max` or lower \
                 `{first}`"
            ),
        ),
        None => (
            first_span.unwrap_or_else(|| args.span()),
            format!(
                "`{first} = {value}` is longer than the default `max` of `{policy}(...)`, \
                 {max}, which caps every delay: add `max = {value}` or more, or lower `{first}`"
            ),
        ),
    };
    Err(syn::Error::new(span, message))
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
            "`max = \"1m\"` is shorter than `base = \"2m\"`: raise `max` or lower `base`"
        );
        assert_eq!(
            err(parse_quote!(linear(step = "2m", max = "1m"))),
            "`max = \"1m\"` is shorter than `step = \"2m\"`: raise `max` or lower `step`"
        );
        assert_eq!(
            err(parse_quote!(fixed())),
            "`fixed` takes one delay: write `fixed(\"30s\")`"
        );
        assert!(err(parse_quote!(linear(max = "1m"))).starts_with("`linear` needs a `step`"));
        assert!(err(parse_quote!(5)).starts_with("`backoff` has the wrong form: use"));
        assert!(err(parse_quote!("30s")).starts_with(
            "`backoff` takes a policy, not a bare duration: write `fixed(\"30s\")` to wait"
        ));
        assert_eq!(
            err(parse_quote!(fixed)),
            "`fixed` needs arguments: write `fixed(\"30s\")`"
        );
        assert!(err(parse_quote!(retry::exponential(base = "1s"))).starts_with(
            "unknown backoff `retry::exponential(...)`: write a built-in policy by its bare name"
        ));
        assert_eq!(
            err(parse_quote!(exponential(base = "x", jitter = 2)))
                .lines()
                .count(),
            2
        );
    }

    #[test]
    fn misspelled_bare_names_get_a_did_you_mean() {
        assert_eq!(
            err(parse_quote!(exponentail)),
            format!(
                "unknown backoff `exponentail`: did you mean `exponential`? {FORMS} (if \
                 `exponentail` is a function of yours, write `self::exponentail`)"
            )
        );
        assert!(err(parse_quote!(lineer))
            .starts_with("unknown backoff `lineer`: did you mean `linear`?"));
        assert!(err(parse_quote!(Fixd)).contains("did you mean `fixed`?"));
        assert!(err(parse_quote!(lienar)).contains("did you mean `linear`?"));
        for own in [
            parse_quote!(linear_ms),
            parse_quote!(fixed2),
            parse_quote!(exponential_slow),
            parse_quote!(retry_delay),
            parse_quote!(self::exponentail),
            parse_quote!(r#fixed),
            parse_quote!(linger),
        ] {
            assert!(
                matches!(parse(&own), Ok(BackoffSpec::Custom(_))),
                "{}",
                quote::ToTokens::to_token_stream(&own)
            );
        }
    }

    #[test]
    fn a_quoted_policy_is_written_without_quotes() {
        assert_eq!(
            err(parse_quote!("exponential")),
            "`backoff` takes a policy, not a string: write it without quotes, like \
             `backoff = exponential(base = \"1s\", max = \"1h\", jitter = 0.1)`"
        );
        assert!(err(parse_quote!("linaer")).starts_with(
            "`backoff` takes a policy, not a string: did you mean `linear`? write it without \
             quotes, like `backoff = linear(step = \"10s\", max = \"10m\")`"
        ));
        assert!(err(parse_quote!("sometimes")).starts_with("`backoff` has the wrong form"));
    }

    #[test]
    fn growth_must_be_above_zero() {
        let e = err(parse_quote!(exponential(base = "0s")));
        assert!(
            e.starts_with("`base = \"0s\"` makes every retry of `exponential(...)` run at once"),
            "{e}"
        );
        assert!(e.ends_with("or write `fixed(\"0s\")` if immediate retries are what you want"));
        let e = err(parse_quote!(linear(step = "0ms", max = "1m")));
        assert!(
            e.starts_with("`step = \"0ms\"` makes every retry of `linear(...)` run at once"),
            "{e}"
        );
        assert_eq!(
            parse(&parse_quote!(fixed("0s"))).unwrap(),
            BackoffSpec::Fixed(Duration::ZERO)
        );
    }

    #[test]
    fn delays_are_capped_at_a_hundred_years() {
        let most = |e: Expr| parse(&e).unwrap();
        assert_eq!(
            most(parse_quote!(fixed("36500d"))),
            BackoffSpec::Fixed(MOST)
        );
        assert_eq!(
            most(parse_quote!(linear(step = "1d", max = "36500d"))),
            BackoffSpec::Linear {
                step: Duration::from_secs(86400),
                max: MOST
            }
        );
        for e in [
            parse_quote!(fixed("36501d")),
            parse_quote!(exponential(max = "200y")),
            parse_quote!(exponential(base = "100y")),
            parse_quote!(linear(step = "1000y")),
        ] {
            let e = err(e);
            assert!(
                e.contains("must be at most \"36500d\" (a hundred years"),
                "{e}"
            );
            assert_eq!(
                e.lines().count(),
                1,
                "no second error on the same delay: {e}"
            );
        }
    }

    #[test]
    fn without_max_the_default_cap_is_named() {
        assert_eq!(
            err(parse_quote!(exponential(base = "2h"))),
            "`base = \"2h\"` is longer than the default `max` of `exponential(...)`, \"1h\", \
             which caps every delay: add `max = \"2h\"` or more, or lower `base`"
        );
        assert!(err(parse_quote!(linear(step = "1h 30m"))).starts_with(
            "`step = \"1h 30m\"` is longer than the default `max` of `linear(...)`, \"1h\","
        ));
    }
}
