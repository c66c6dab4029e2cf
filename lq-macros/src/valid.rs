//! Checks the raw `#[job(...)]` entries and converts them into a [`JobSpec`].

use std::time::Duration;

use syn::{Ident, LitStr};

use crate::ast::Input;
use crate::attr::Entries;
use crate::backoff::{self, BackoffSpec};
use crate::cron::{self, CatchUp, Schedule};
use crate::diag::Errors;
use crate::template::{self, Template};
use crate::{duration, lit};

/// Longest queue or kind name, as `lq_core::MAX_NAME_LEN`.
const MAX_NAME_LEN: usize = 128;
/// Shortest lease: heartbeats need time to renew it.
const MIN_LEASE: Duration = Duration::from_secs(1);
/// Longest `lease`: a day.
const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);

/// Everything the expansion needs, checked.
#[derive(Debug, Clone)]
pub(crate) struct JobSpec {
    /// The type.
    pub(crate) ident: Ident,
    /// Stored kind name.
    pub(crate) kind: String,
    /// Queue name.
    pub(crate) queue: String,
    /// Priority, larger first.
    pub(crate) priority: i16,
    /// Claims before dead, at least 1.
    pub(crate) max_attempts: u32,
    /// Retry policy.
    pub(crate) backoff: BackoffSpec,
    /// Unique key template.
    pub(crate) unique_key: Option<Template>,
    /// Per-attempt limit.
    pub(crate) timeout: Option<Duration>,
    /// Lease at claim; `None` is `DEFAULT_LEASE`.
    pub(crate) lease: Option<Duration>,
    /// Recurring schedule.
    pub(crate) cron: Option<Schedule>,
    /// `crate = "..."` override.
    pub(crate) krate: Option<syn::Path>,
}

/// Validates every entry, reporting all mistakes at once.
pub(crate) fn validate(input: &Input<'_>, mut entries: Entries) -> syn::Result<JobSpec> {
    let mut errors = Errors::default();
    let name = input.name();
    let mut spec = JobSpec {
        ident: input.ident.clone(),
        kind: name.clone(),
        queue: "default".into(),
        priority: 0,
        max_attempts: 20,
        backoff: BackoffSpec::Default,
        unique_key: None,
        timeout: None,
        lease: None,
        cron: None,
        krate: None,
    };

    match entries.take("kind") {
        Some(e) => {
            if let Some(kind) = errors.ok(lit::string("kind", "send_welcome_email", &e.value)) {
                spec.kind = errors.ok(check_name("kind", &kind)).unwrap_or_default();
            }
        }
        None => {
            if let Err(reason) = name_rule(&name) {
                errors.at(
                    input.ident.span(),
                    format!(
                        "the kind defaults to the type name `{name}`, which is not a valid \
                         kind ({reason}): set one with `#[job(kind = \"...\")]`"
                    ),
                );
            }
        }
    }
    if let Some(e) = entries.take("queue") {
        if let Some(queue) = errors.ok(lit::string("queue", "emails", &e.value)) {
            spec.queue = errors.ok(check_name("queue", &queue)).unwrap_or_default();
        }
    }
    if let Some(e) = entries.take("priority") {
        let range = "-32768..=32767 (an i16; larger runs first)";
        if let Some((p, _)) = errors.ok(lit::int::<i16>("priority", range, "10", &e.value)) {
            spec.priority = p;
        }
    }
    if let Some(e) = entries.take("max_attempts") {
        let range = "1..=2147483647 (claims before the job is dead; the database stores it \
                     as a PostgreSQL integer)";
        if let Some((m, span)) = errors.ok(lit::int::<i32>("max_attempts", range, "5", &e.value)) {
            match u32::try_from(m) {
                Ok(m) if m >= 1 => spec.max_attempts = m,
                _ => errors.at(
                    span,
                    "`max_attempts` must be at least 1: it counts claims, including the first \
                     run",
                ),
            }
        }
    }
    if let Some(e) = entries.take("backoff") {
        spec.backoff = errors
            .ok(backoff::parse(&e.value))
            .unwrap_or(BackoffSpec::Default);
    }
    if let Some(e) = entries.take("unique_key") {
        if let Some(lit) = errors.ok(lit::string("unique_key", "order:{order_id}", &e.value)) {
            spec.unique_key = errors.ok(template::resolve(&lit, &name, &input.fields));
        }
    }
    if let Some(e) = entries.take("timeout") {
        spec.timeout = errors.ok(timeout(&e.value)).map(|d| d.value);
    }
    if let Some(e) = entries.take("lease") {
        spec.lease = errors
            .ok(duration::parse_between(
                "lease",
                &e.value,
                MIN_LEASE,
                MAX_LEASE,
                "the heartbeat renews a lease every quarter of it while the job runs, so a \
                 long job needs no long lease, and a crashed worker's jobs wait out the whole \
                 lease before they are rescued",
            ))
            .map(|d| d.value);
    }
    spec.cron = schedule(&mut entries, &mut errors);
    if let Some(e) = entries.take("crate") {
        if let Some(lit) = errors.ok(lit::string("crate", "::lq_runtime", &e.value)) {
            spec.krate = errors.ok(lit.parse::<syn::Path>().map_err(|_| {
                syn::Error::new(
                    lit.span(),
                    "`crate` must be a path to the litequeue crate, like \"::lq_runtime\" or \
                     \"my_app::lq\"",
                )
            }));
        }
    }
    debug_assert!(entries.0.is_empty(), "every key in attr::KEYS is handled");
    errors.finish(spec)
}

/// `timeout`: at least 1ms. Zero, which elsewhere often means "no limit", gets a
/// message of its own: here no `timeout` is no limit.
fn timeout(value: &syn::Expr) -> syn::Result<duration::Spanned> {
    let d = duration::parse("timeout", value)?;
    if d.value.is_zero() {
        return Err(syn::Error::new(
            d.lit.span(),
            format!(
                "`timeout = {:?}` would end every attempt as it starts: remove `timeout` for \
                 no limit (the default), or give the longest one attempt may run, like \
                 `timeout = \"30s\"`",
                d.lit.value()
            ),
        ));
    }
    duration::parse_at_least("timeout", value, Duration::from_millis(1))
}

/// `cron`, `cron_tz` and `cron_catch_up` together.
fn schedule(entries: &mut Entries, errors: &mut Errors) -> Option<Schedule> {
    let cron = entries.take("cron");
    let tz = entries.take("cron_tz");
    let catch_up = entries.take("cron_catch_up");
    if cron.is_none() {
        for e in [&tz, &catch_up].into_iter().flatten() {
            errors.at(
                e.key_span,
                format!(
                    "`{}` only applies to cron jobs: add `cron = \"...\"` or remove it",
                    e.key
                ),
            );
        }
        return None;
    }
    let mut schedule = Schedule {
        expr: String::new(),
        tz: "UTC".into(),
        catch_up: CatchUp::Once,
    };
    let mut ok = true;
    let cron = cron?;
    let cron_lit = errors.ok(lit::string("cron", "*/5 * * * *", &cron.value));
    match cron_lit
        .as_ref()
        .and_then(|l| errors.ok(cron::check_expr(l)))
    {
        Some(expr) => schedule.expr = expr,
        None => ok = false,
    }
    if let Some(e) = tz {
        match errors
            .ok(lit::string("cron_tz", "Europe/Paris", &e.value).and_then(|l| cron::check_tz(&l)))
        {
            Some(tz) => schedule.tz = tz,
            None => ok = false,
        }
    }
    if let Some(e) = catch_up {
        match errors
            .ok(lit::string("cron_catch_up", "once", &e.value)
                .and_then(|l| cron::check_catch_up(&l)))
        {
            Some(c) => schedule.catch_up = c,
            None => ok = false,
        }
    }
    if let (true, Some(lit)) = (ok, &cron_lit) {
        ok = errors
            .ok(cron::check_fires(lit, &schedule.expr, &schedule.tz))
            .is_some();
    }
    ok.then_some(schedule)
}

/// Applies the naming rule to a `kind` or `queue` literal.
fn check_name(what: &str, lit: &LitStr) -> syn::Result<String> {
    let name = lit.value();
    name_rule(&name).map(|()| name.clone()).map_err(|reason| {
        syn::Error::new(lit.span(), format!("invalid `{what}` {name:?}: {reason}"))
    })
}

/// The naming rule of `lq_core::validate_name`: 1–128 bytes of `A-Z a-z 0-9 _ - . :`,
/// not only dots.
fn name_rule(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("it is empty; use 1 to 128 of the characters A-Z a-z 0-9 _ - . :")
    } else if name.len() > MAX_NAME_LEN {
        Err("it is longer than 128 characters; shorten it")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b))
    {
        Err("use only the characters A-Z a-z 0-9 _ - . : (no spaces)")
    } else if name.bytes().all(|b| b == b'.') {
        Err("it is only dots, which a URL reads as a path step (the dashboard could not address it)")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::{parse_quote, DeriveInput};

    fn run(input: DeriveInput) -> Result<JobSpec, Vec<String>> {
        let ast = Input::from_derive(&input).unwrap();
        let messages = |e: syn::Error| e.into_iter().map(|e| e.to_string()).collect::<Vec<_>>();
        let entries = Entries::from_attrs(&input.attrs).map_err(messages)?;
        validate(&ast, entries).map_err(messages)
    }

    fn err(input: DeriveInput) -> String {
        run(input).unwrap_err().join("\n")
    }

    #[test]
    fn defaults_without_attributes() {
        let s = run(parse_quote!(
            struct SendWelcomeEmail {
                user_id: i64,
            }
        ))
        .unwrap();
        assert_eq!(
            (s.kind.as_str(), s.queue.as_str()),
            ("SendWelcomeEmail", "default")
        );
        assert_eq!((s.priority, s.max_attempts), (0, 20));
        assert_eq!(s.backoff, BackoffSpec::Default);
        assert!(s.unique_key.is_none() && s.timeout.is_none() && s.lease.is_none());
        assert!(s.cron.is_none() && s.krate.is_none());
    }

    #[test]
    fn every_key_together() {
        let s = run(parse_quote! {
            #[job(kind = "report.nightly", queue = "reports", priority = -3, max_attempts = 1)]
            #[job(backoff = fixed("30s"), unique_key = "r:{day}", timeout = "1h 30m", lease = "2m")]
            #[job(cron = "0 3 * * *", cron_tz = "Europe/Paris", cron_catch_up = "skip")]
            #[job(crate = "my_app::lq")]
            struct Report { day: u32 }
        })
        .unwrap();
        assert_eq!(
            (s.kind.as_str(), s.queue.as_str()),
            ("report.nightly", "reports")
        );
        assert_eq!((s.priority, s.max_attempts), (-3, 1));
        assert_eq!(s.backoff, BackoffSpec::Fixed(Duration::from_secs(30)));
        assert_eq!(s.unique_key.unwrap().escape, "");
        assert_eq!(s.timeout, Some(Duration::from_secs(5400)));
        assert_eq!(s.lease, Some(Duration::from_secs(120)));
        let cron = s.cron.unwrap();
        assert_eq!(
            (cron.expr.as_str(), cron.tz.as_str()),
            ("0 3 * * *", "Europe/Paris")
        );
        assert_eq!(cron.catch_up, CatchUp::Skip);
        assert_eq!(s.krate, Some(parse_quote!(my_app::lq)));
    }

    #[test]
    fn names_follow_the_rule() {
        let e = err(parse_quote!(
            #[job(queue = "my queue")]
            struct A;
        ));
        assert_eq!(
            e,
            "invalid `queue` \"my queue\": use only the characters A-Z a-z 0-9 _ - . : (no spaces)"
        );
        let e = err(parse_quote!(
            #[job(kind = "")]
            struct A;
        ));
        assert!(e.starts_with("invalid `kind` \"\": it is empty"), "{e}");
        let long = "k".repeat(129);
        let e = err(parse_quote!(
            #[job(kind = #long)]
            struct A;
        ));
        assert!(e.contains("longer than 128"), "{e}");
        let e = err(parse_quote!(
            struct Café;
        ));
        assert!(
            e.starts_with("the kind defaults to the type name `Café`"),
            "{e}"
        );
        assert!(run(parse_quote!(
            #[job(kind = "x")]
            struct Café;
        ))
        .is_ok());
    }

    #[test]
    fn numbers_are_range_checked() {
        let e = err(parse_quote!(
            #[job(max_attempts = 0)]
            struct A;
        ));
        assert!(e.starts_with("`max_attempts` must be at least 1"), "{e}");
        let e = err(parse_quote!(
            #[job(max_attempts = -1)]
            struct A;
        ));
        assert!(e.starts_with("`max_attempts` must be at least 1"), "{e}");
        let e = err(parse_quote!(
            #[job(max_attempts = 2147483648)]
            struct A;
        ));
        assert!(
            e.starts_with("`max_attempts` must be in 1..=2147483647 (claims"),
            "{e}"
        );
        assert!(e.ends_with("got 2147483648"), "{e}");
        let max = run(parse_quote!(
            #[job(max_attempts = 2147483647)]
            struct A;
        ));
        assert_eq!(max.unwrap().max_attempts, 2_147_483_647);
        let e = err(parse_quote!(
            #[job(priority = 32768)]
            struct A;
        ));
        assert!(e.starts_with("`priority` must be in -32768..=32767"), "{e}");
        assert_eq!(
            run(parse_quote!(
                #[job(priority = -32768)]
                struct A;
            ))
            .unwrap()
            .priority,
            i16::MIN
        );
    }

    #[test]
    fn durations_and_cron_keys() {
        let e = err(parse_quote!(
            #[job(lease = "500ms")]
            struct A;
        ));
        assert_eq!(e, "`lease` must be at least \"1s\", got \"500ms\"");
        let e = err(parse_quote!(
            #[job(timeout = "0s")]
            struct A;
        ));
        assert!(
            e.starts_with("`timeout = \"0s\"` would end every attempt as it starts: remove"),
            "{e}"
        );
        let e = err(parse_quote!(
            #[job(timeout = "10us")]
            struct A;
        ));
        assert!(e.starts_with("`timeout` must be at least \"1ms\""), "{e}");
        let e = err(parse_quote!(
            #[job(cron_tz = "UTC", cron_catch_up = "once")]
            struct A;
        ));
        assert_eq!(
            e,
            "`cron_tz` only applies to cron jobs: add `cron = \"...\"` or remove it\n\
             `cron_catch_up` only applies to cron jobs: add `cron = \"...\"` or remove it"
        );
        let e = err(parse_quote!(
            #[job(cron = 5)]
            struct A;
        ));
        assert_eq!(
            e,
            "`cron` must be a string literal, like `cron = \"*/5 * * * *\"`"
        );
    }

    #[test]
    fn reports_all_mistakes_at_once() {
        let e = run(parse_quote!(
            #[job(queue = "a b", priority = "x", lease = "1")]
            struct A;
        ));
        assert_eq!(e.unwrap_err().len(), 3);
    }

    #[test]
    fn crate_must_be_a_path() {
        let e = err(parse_quote!(
            #[job(crate = "not a path")]
            struct A;
        ));
        assert!(e.starts_with("`crate` must be a path"), "{e}");
    }
}
