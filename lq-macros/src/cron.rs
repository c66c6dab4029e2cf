//! `cron`, `cron_tz` and `cron_catch_up`: a recurring schedule checked at compile time.

use std::str::FromStr as _;

use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};
use syn::LitStr;

use crate::diag::{backticked, closest};

/// The missed-tick policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatchUp {
    /// `"once"`: one run for the whole missed window (default).
    Once,
    /// `"skip"`: drop missed ticks.
    Skip,
}

/// A validated schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Schedule {
    /// The expression as written.
    pub(crate) expr: String,
    /// IANA zone name.
    pub(crate) tz: String,
    /// Missed-tick policy.
    pub(crate) catch_up: CatchUp,
}

/// The accepted forms, which end every message about an expression croner refuses.
const FORMS: &str = "the accepted forms are 5 fields (minute hour day-of-month month \
                     day-of-week, like \"*/5 * * * *\"), 6 with leading seconds (like \
                     \"0 */5 * * * *\"), or a nickname like \"@daily\"";

/// The nicknames croner reads, each standing alone for a whole expression.
const NICKNAMES: [&str; 6] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@hourly",
];

/// Checks a cron expression: 5 fields, or 6 with leading seconds (or an `@daily`-style
/// nickname), parsed by `croner`, as the runtime parses it.
///
/// croner's own errors ("Component error: Number out of bounds.") name neither the
/// field nor the fix, so the message is ours: what is wrong, in words, then the
/// accepted forms. croner's text stays only as a trailing hint when we cannot say
/// more ourselves.
pub(crate) fn check_expr(lit: &LitStr) -> syn::Result<String> {
    let expr = lit.value();
    let parser = parser();
    let Err(error) = parser.parse(&expr) else {
        return Ok(expr);
    };
    Err(syn::Error::new(
        lit.span(),
        format!(
            "invalid `cron` expression {expr:?}: {}; {FORMS}",
            problem(&parser, &expr, &error)
        ),
    ))
}

/// What is wrong with `expr`, which croner refused with `error`, in plain words.
fn problem(parser: &CronParser, expr: &str, error: &CronError) -> String {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let Some(first) = fields.first() else {
        return "it is empty".to_owned();
    };
    if first.starts_with('@') {
        let known = NICKNAMES.iter().find(|n| n.eq_ignore_ascii_case(first));
        return match known {
            Some(nickname) => format!(
                "the nickname `{nickname}` stands alone: remove `{}` after it",
                fields[1..].join(" ")
            ),
            None => format!(
                "unknown nickname `{first}`: {}the nicknames are {}",
                closest(first, NICKNAMES)
                    .map(|n| format!("did you mean `{n}`? "))
                    .unwrap_or_default(),
                backticked(NICKNAMES)
            ),
        };
    }
    if !(5..=6).contains(&fields.len()) {
        return format!("it has {}", plural(fields.len(), "field"));
    }
    match culprit(parser, &fields) {
        Some((name, value, error)) => field_problem(name, value, &error),
        None => format!("croner cannot read it ({})", detail(error)),
    }
}

/// `1 field`, `4 fields`.
fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// What is wrong with one field, `value`, that croner refuses with `error` when
/// every other field is `*`.
fn field_problem(name: &str, value: &str, error: &CronError) -> String {
    let takes = takes(name);
    let forms = "alone, in a list (`1,15`), a range (`1-5`) or a step (`*/10`)";
    match error {
        CronError::ComponentError(m) if m.contains("out of bounds") || m.contains("exceeded") => {
            format!("the {name} field `{value}` is out of range: it takes {takes}")
        }
        CronError::ComponentError(m) if m.contains("Step cannot be zero") => {
            format!("the {name} field `{value}` steps by 0: use a step of at least 1, like `*/5`")
        }
        CronError::IllegalCharacters(_) => format!(
            "the {name} field `{value}` is not something cron reads there: it takes {takes}, \
             {forms}"
        ),
        other => format!(
            "the {name} field `{value}` is not valid: it takes {takes}, {forms} (croner: {})",
            detail(other)
        ),
    }
}

/// The values a field takes, as a user writes them.
fn takes(name: &str) -> &'static str {
    match name {
        "second" | "minute" => "0-59",
        "hour" => "0-23",
        "day-of-month" => "1-31, `L` (the last day) or `15W` (the weekday nearest the 15th)",
        "month" => "1-12 or JAN-DEC",
        _ => {
            "0-7 (0 and 7 are Sunday) or SUN-SAT, `MON#2` (the second Monday) or `5L` (the \
              last Friday)"
        }
    }
}

/// croner's message without its prefix ("Component error: ") and final period.
fn detail(error: &CronError) -> String {
    let text = match error {
        CronError::InvalidPattern(m)
        | CronError::IllegalCharacters(m)
        | CronError::ComponentError(m) => m.clone(),
        other => other.to_string(),
    };
    text.trim_end_matches('.').to_owned()
}

/// The parser the runtime uses (`lq_core::cron::Schedule::parse`).
fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

/// Checks that a valid expression fires at least once when read in zone `tz`.
///
/// Without a year field a schedule repeats every 400 years (the Gregorian calendar
/// and its weekdays both do), so croner's search from a fixed instant, which gives up
/// at year 5000, finds a tick if there is one; the runtime asks croner the same way.
pub(crate) fn check_fires(lit: &LitStr, expr: &str, tz: &str) -> syn::Result<()> {
    if fires(expr, tz) {
        return Ok(());
    }
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let (dow, date_fields) = fields.split_last().unwrap_or((&"*", &[]));
    let any_weekday = [date_fields, &["*"]].concat().join(" ");
    let reason = if *dow != "*" && fires(&any_weekday, tz) {
        format!(
            "no date matches both its day-of-month and its day-of-week `{dow}`; loosen one of \
             them (the day-of-month is only matched on that weekday)"
        )
    } else {
        "no date matches its day-of-month and month (no such date, like February 31); use \
         a day each chosen month has, or `L` for the last day of the month"
            .to_owned()
    };
    Err(syn::Error::new(
        lit.span(),
        format!("the `cron` expression {expr:?} never fires: {reason}"),
    ))
}

/// Whether croner finds a tick after a fixed instant (so the answer does not depend
/// on when the code is compiled).
fn fires(expr: &str, tz: &str) -> bool {
    let (Ok(cron), Ok(tz)) = (parser().parse(expr), chrono_tz::Tz::from_str(tz)) else {
        return true; // reported by `check_expr` or `check_tz`
    };
    // 2000-01-01T00:00:00Z
    let Some(start) = chrono::DateTime::from_timestamp(946_684_800, 0) else {
        return true;
    };
    cron.find_next_occurrence(&start.with_timezone(&tz), false)
        .is_ok()
}

/// The first field that fails on its own, every other field replaced by `*`: its
/// name, its text and croner's error. `fields` holds 5 or 6 fields.
fn culprit<'a>(
    parser: &CronParser,
    fields: &[&'a str],
) -> Option<(&'static str, &'a str, CronError)> {
    const NAMES: [&str; 6] = [
        "second",
        "minute",
        "hour",
        "day-of-month",
        "month",
        "day-of-week",
    ];
    let names = &NAMES[NAMES.len() - fields.len()..];
    (0..fields.len()).find_map(|i| {
        let alone: Vec<&str> = (0..fields.len())
            .map(|j| if i == j { fields[j] } else { "*" })
            .collect();
        parser
            .parse(&alone.join(" "))
            .err()
            .map(|e| (names[i], fields[i], e))
    })
}

/// Checks an IANA time zone name.
pub(crate) fn check_tz(lit: &LitStr) -> syn::Result<String> {
    let tz = lit.value();
    if chrono_tz::Tz::from_str(&tz).is_ok() {
        return Ok(tz);
    }
    let hint = closest(&tz, chrono_tz::TZ_VARIANTS.iter().map(|z| z.name()))
        .map(|z| format!("did you mean \"{z}\"? "))
        .unwrap_or_default();
    Err(syn::Error::new(
        lit.span(),
        format!(
            "unknown time zone {tz:?}: {hint}use an IANA name such as \"UTC\", \
             \"Europe/Paris\" or \"America/New_York\""
        ),
    ))
}

/// Reads `"once"` or `"skip"`.
pub(crate) fn check_catch_up(lit: &LitStr) -> syn::Result<CatchUp> {
    match lit.value().as_str() {
        "once" => Ok(CatchUp::Once),
        "skip" => Ok(CatchUp::Skip),
        other => Err(syn::Error::new(
            lit.span(),
            format!(
                "unknown `cron_catch_up` {other:?}: use \"once\" (run once for ticks missed \
                 while no runtime ran) or \"skip\" (drop them)"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn expr(s: LitStr) -> Result<String, String> {
        check_expr(&s).map_err(|e| e.to_string())
    }

    #[test]
    fn accepts_five_and_six_fields_and_nicknames() {
        assert!(expr(parse_quote!("*/5 * * * *")).is_ok());
        assert!(expr(parse_quote!("30 0 3 * * MON-FRI")).is_ok());
        assert!(expr(parse_quote!("@daily")).is_ok());
    }

    #[test]
    fn rejects_bad_expressions() {
        let e = expr(parse_quote!("* * * *")).unwrap_err();
        assert!(
            e.starts_with("invalid `cron` expression \"* * * *\": it has 4 fields; the accepted"),
            "{e}"
        );
        assert!(e.ends_with(FORMS), "{e}");
        let e = expr(parse_quote!("* * * * * * 2030")).unwrap_err();
        assert!(e.contains(": it has 7 fields; "), "{e}");
        let e = expr(parse_quote!("  ")).unwrap_err();
        assert!(e.contains(": it is empty; "), "{e}");
    }

    #[test]
    fn names_the_field_and_what_is_wrong() {
        let e = expr(parse_quote!("*/5 * * 13 *")).unwrap_err();
        assert_eq!(
            e,
            format!(
                "invalid `cron` expression \"*/5 * * 13 *\": the month field `13` is out of \
                 range: it takes 1-12 or JAN-DEC; {FORMS}"
            )
        );
        let e = expr(parse_quote!("0 0 61 * * *")).unwrap_err();
        assert!(
            e.contains(": the hour field `61` is out of range: it takes 0-23; "),
            "{e}"
        );
        let e = expr(parse_quote!("0 0 * * 8")).unwrap_err();
        assert!(
            e.contains("the day-of-week field `8` is out of range"),
            "{e}"
        );
        assert!(expr(parse_quote!("0 0 * * 7")).is_ok());
        let e = expr(parse_quote!("*/0 * * * *")).unwrap_err();
        assert!(e.contains("the minute field `*/0` steps by 0"), "{e}");
        let e = expr(parse_quote!("0 9 * * MONDAY")).unwrap_err();
        assert!(
            e.contains("the day-of-week field `MONDAY` is not something cron reads there"),
            "{e}"
        );
        let e = expr(parse_quote!("5/10 * * * *")).unwrap_err();
        assert!(e.contains("the minute field `5/10` is not valid: "), "{e}");
        assert!(e.contains("(croner: Invalid step syntax: "), "{e}");
        assert!(!e.contains("Component error"), "{e}");
    }

    #[test]
    fn nicknames_stand_alone_and_are_known() {
        assert!(expr(parse_quote!("@DAILY")).is_ok());
        let e = expr(parse_quote!("@daily 1 2 3 4 5 6 7")).unwrap_err();
        assert!(
            e.starts_with(
                "invalid `cron` expression \"@daily 1 2 3 4 5 6 7\": the nickname `@daily` \
                 stands alone: remove `1 2 3 4 5 6 7` after it; "
            ),
            "{e}"
        );
        let e = expr(parse_quote!("@dayly")).unwrap_err();
        assert!(
            e.starts_with(
                "invalid `cron` expression \"@dayly\": unknown nickname `@dayly`: did you mean \
                 `@daily`? the nicknames are `@yearly`, "
            ),
            "{e}"
        );
        let e = expr(parse_quote!("@often")).unwrap_err();
        assert!(
            e.contains("unknown nickname `@often`: the nicknames"),
            "{e}"
        );
    }

    fn fires_in(expr: &str, tz: &str) -> Result<(), String> {
        let lit: LitStr = parse_quote!("unused");
        check_fires(&lit, expr, tz).map_err(|e| e.to_string())
    }

    #[test]
    fn rare_schedules_fire() {
        for expr in [
            "0 0 29 2 *",
            "0 0 0 29 2 *",
            "0 0 L 2 *",
            "0 0 31 2 MON",
            "0 0 30 1,2 *",
            "0 0 29 2 +MON",
            "0 0 31 * +FRI",
            "@yearly",
        ] {
            assert_eq!(fires_in(expr, "UTC"), Ok(()), "{expr}");
        }
        assert_eq!(fires_in("30 2 29 3 *", "Europe/Paris"), Ok(()));
        assert_eq!(fires_in("0 0 29 2 *", "Pacific/Apia"), Ok(()));
    }

    #[test]
    fn impossible_dates_never_fire() {
        assert_eq!(
            fires_in("0 0 31 2 *", "UTC").unwrap_err(),
            "the `cron` expression \"0 0 31 2 *\" never fires: no date matches its day-of-month \
             and month (no such date, like February 31); use a day each chosen month has, or \
             `L` for the last day of the month"
        );
        for expr in [
            "0 0 30 2 *",
            "0 0 0 31 4,6 *",
            "0 0 31 2,4 *",
            "0 0 31 2 +MON",
        ] {
            let e = fires_in(expr, "Europe/Paris").unwrap_err();
            assert!(
                e.contains("(no such date, like February 31)"),
                "{expr}: {e}"
            );
        }
        let e = fires_in("0 0 1 * +MON#5", "UTC").unwrap_err();
        assert!(
            e.ends_with(
                "no date matches both its day-of-month and its day-of-week `+MON#5`; \
                         loosen one of them (the day-of-month is only matched on that weekday)"
            ),
            "{e}"
        );
    }

    #[test]
    fn checks_time_zones_and_catch_up() {
        assert_eq!(
            check_tz(&parse_quote!("Europe/Paris")).unwrap(),
            "Europe/Paris"
        );
        let e = check_tz(&parse_quote!("Europe/Pariss"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("unknown time zone \"Europe/Pariss\": did you mean \"Europe/Paris\"?"),
            "{e}"
        );
        assert_eq!(
            check_catch_up(&parse_quote!("skip")).unwrap(),
            CatchUp::Skip
        );
        assert!(check_catch_up(&parse_quote!("all")).is_err());
    }
}
