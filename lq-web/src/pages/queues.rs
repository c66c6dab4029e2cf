//! `/queues`: every queue with its live counts, oldest wait and pause, with
//! pause and resume.

use std::sync::Arc;

use axum::{extract::State, http::Uri, response::Response};
use lq_core::control::QueueInfo;
use maud::{html, Markup};

use crate::{context::Ctx, error::PageError, layout, params::Pairs, Shared};

pub(crate) async fn page(ctx: Ctx, State(sh): State<Arc<Shared>>, uri: Uri) -> Response {
    let q = Pairs::from_query(&uri);
    let result = async {
        let queues = sh.counts.queues(&sh.pool).await?;
        Ok::<_, PageError>(html! {
            (layout::flash(flash(&q)))
            h1 { "Queues" }
            @if queues.is_empty() {
                p.empty { "No queue has live jobs or a pause record." }
            } @else {
                table.queues {
                    thead { tr {
                        th { "queue" } th { "status" } th.num { "available" } th.num { "scheduled" }
                        th.num { "running" } th { "oldest wait" } th { "rate limit" } th { "paused since" } th { "paused by" }
                        @if ctx.can_act() { th {} }
                    } }
                    tbody {
                        @for q in &queues {
                            tr data-queue=(q.name) {
                                td { a href={ (ctx.url("/jobs")) "?queue=" (enc(&q.name)) } { (q.name) } }
                                td { (status(q)) }
                                td.num { (layout::count(q.available)) }
                                td.num { (layout::count(q.scheduled)) }
                                td.num { (layout::count(q.running)) }
                                td { (q.oldest_available_wait.map(layout::duration).unwrap_or_default()) }
                                td.rate { (q.rate_limit.as_ref().map(ToString::to_string).unwrap_or_default()) }
                                td { (layout::opt_time(q.paused.as_ref().map(|p| p.at))) }
                                td { (q.paused.as_ref().map(|p| p.by.as_str()).unwrap_or("")) }
                                @if ctx.can_act() { td { (toggle(&ctx, &q.name, q.paused.is_some(), "queues")) } }
                            }
                        }
                    }
                }
            }
        })
    }
    .await;
    ctx.render("Queues", result)
}

/// The outcome of a pause or resume that redirected here (or to the overview).
pub(crate) fn flash(q: &Pairs) -> Option<String> {
    let queue = q.get("queue")?;
    Some(match q.get("done")? {
        "pause" => format!("Queue {queue} paused."),
        "resume" => format!("Queue {queue} resumed."),
        "unchanged" => format!("Queue {queue} was already so."),
        _ => return None,
    })
}

/// A paused or active badge.
pub(crate) fn status(q: &QueueInfo) -> Markup {
    html! {
        @if q.paused.is_some() {
            span.badge.paused { "paused" }
        } @else {
            span.badge.active { "active" }
        }
    }
}

/// The pause or resume button of a queue; `back` is the page to return to.
pub(crate) fn toggle(ctx: &Ctx, name: &str, paused: bool, back: &str) -> Markup {
    let (action, label) = if paused {
        ("resume", "Resume")
    } else {
        ("pause", "Pause")
    };
    let confirm = (!paused).then(|| format!("Pause queue {name}?"));
    html! {
        form.inline method="post" action=(ctx.url(&format!("/queues/{}/{action}", enc_path(name)))) data-confirm=[confirm] {
            (ctx.csrf_field())
            input type="hidden" name="back" value=(back);
            button type="submit" { (label) }
        }
    }
}

pub(crate) fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A queue name or job kind as one path segment (names are `A-Z a-z 0-9 _ -
/// . :`, so this only matters for names that break the rule).
pub(crate) fn enc_path(s: &str) -> String {
    enc(s).replace('+', "%20")
}
