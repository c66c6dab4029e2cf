//! The page shell (head, navigation, `<main>`) and the small pieces every page
//! uses: state badges, times, durations, numbers.

use std::time::Duration;

use chrono::{DateTime, Utc};
use lq_core::JobState;
use maud::{html, Markup, DOCTYPE};

use crate::{access::Access, api::asset_version, context::Ctx};

/// The sections in the navigation bar: path and label.
const NAV: [(&str, &str); 6] = [
    ("/", "Overview"),
    ("/jobs", "Jobs"),
    ("/queues", "Queues"),
    ("/cron", "Cron"),
    ("/runtimes", "Runtimes"),
    ("/doctor", "Doctor"),
];

/// What every delete confirmation says before its button.
pub(crate) const DELETE_IS_FOR_GOOD: &str =
    "A deleted job leaves no history; a queued one never runs.";

/// A whole page: `body` inside `<main>`, with the navigation and assets.
pub(crate) fn shell(ctx: &Ctx, title: &str, body: Markup) -> Markup {
    let refresh = ctx.refresh.map(|d| d.as_secs_f64().to_string());
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · lq" }
                link rel="stylesheet" href={ (ctx.url("/assets/lq.css")) "?v=" (asset_version()) };
                script src={ (ctx.url("/assets/lq.js")) "?v=" (asset_version()) } defer {}
            }
            body data-refresh=[refresh] {
                header.top {
                    a.brand href=(ctx.url("/")) { "lq" }
                    nav {
                        @for (path, label) in NAV {
                            @let here = ctx.path == path
                                || (path != "/" && ctx.path.starts_with(path));
                            a class=[here.then_some("current")] href=(ctx.url(path)) { (label) }
                        }
                    }
                    span.spacer {}
                    @if ctx.access != Access::Full {
                        span.badge.readonly title="actions are not allowed for you here" {
                            (ctx.access.as_str())
                        }
                    }
                    @if let Some(user) = &ctx.user {
                        span.user { (user) }
                    }
                    @if ctx.refresh.is_some() {
                        button #lq-refresh type="button" hidden { "Pause refresh" }
                    }
                }
                main #lq-main { (body) }
                footer.page { "Times are UTC (database time). litequeue " (env!("CARGO_PKG_VERSION")) }
            }
        }
    }
}

/// A job state as a coloured badge.
pub(crate) fn state_badge(state: JobState) -> Markup {
    html! { span class={ "badge state-" (state.as_str()) } { (state.as_str()) } }
}

/// A database time, to the second, in UTC.
pub(crate) fn time(t: DateTime<Utc>) -> Markup {
    html! { time datetime=(t.to_rfc3339()) title="UTC" { (t.format("%Y-%m-%d %H:%M:%S")) } }
}

/// An optional time, or a dash.
pub(crate) fn opt_time(t: Option<DateTime<Utc>>) -> Markup {
    match t {
        Some(t) => time(t),
        None => html! { span.muted { "–" } },
    }
}

/// A duration for people: `850ms`, `42s`, `3m 12s`, `5h 02m`, `2d 03h`.
pub(crate) fn duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// A count with thousands separators: `1,234,567`.
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A one-line notice at the top of a page (the outcome of an action).
pub(crate) fn flash(text: Option<String>) -> Markup {
    html! {
        @if let Some(text) = text {
            p.flash role="status" { (text) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_durations_read_well() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1234), "1,234");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_secs(192)), "3m 12s");
        assert_eq!(duration(Duration::from_secs(5 * 3600 + 120)), "5h 02m");
        assert_eq!(
            duration(Duration::from_secs(2 * 86_400 + 3 * 3600)),
            "2d 03h"
        );
    }
}
