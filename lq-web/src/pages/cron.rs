//! `/cron`: every recurring kind's schedule — expression, zone, catch-up,
//! last tick and next fire — with "Run now".

use std::sync::Arc;

use axum::{extract::State, http::Uri, response::Response};
use lq_core::control;
use maud::{html, Markup};

use super::queues::{enc, enc_path};
use crate::{context::Ctx, error::PageError, layout, params::Pairs, Shared};

pub(crate) async fn page(ctx: Ctx, State(sh): State<Arc<Shared>>, uri: Uri) -> Response {
    let q = Pairs::from_query(&uri);
    let result = async {
        let schedules = control::cron_schedules(&sh.pool).await?;
        Ok::<_, PageError>(html! {
            @if let Some((kind, id)) = ran(&q) {
                p.flash role="status" {
                    "Job " a href=(ctx.url(&format!("/jobs/{id}"))) { (id) } " of kind " (kind) " enqueued."
                }
            }
            h1 { "Cron" }
            @if schedules.is_empty() {
                p.empty { "No recurring job has been scheduled." }
            } @else {
                table.cron {
                    thead { tr {
                        th { "kind" } th { "expression" } th { "zone" } th { "catch-up" } th { "queue" }
                        th { "last tick" } th { "next fire" } th.num { "last job" } th { "declared by" } th { "checked" }
                        @if ctx.can_act() { th {} }
                    } }
                    tbody {
                        @for s in &schedules {
                            tr data-kind=(s.kind) {
                                td { a href={ (ctx.url("/jobs")) "?kind=" (enc(&s.kind)) } { (s.kind) } }
                                td { code { (s.expr.as_deref().unwrap_or("–")) } }
                                td { (s.tz.as_deref().unwrap_or("–")) }
                                td { (s.catch_up.as_deref().unwrap_or("–")) }
                                td { (s.queue.as_deref().unwrap_or("–")) }
                                td { (layout::time(s.last_tick)) }
                                td.next { (layout::opt_time(s.next_tick)) }
                                td.num {
                                    @if let Some(id) = s.last_job_id {
                                        a href=(ctx.url(&format!("/jobs/{id}"))) { (id) }
                                    } @else { "–" }
                                }
                                td { (s.declared_by.as_deref().unwrap_or("–")) }
                                td { (layout::time(s.checked_at)) }
                                @if ctx.can_act() {
                                    td {
                                        @if s.runnable { (run_now(&ctx, &s.kind)) }
                                        @else {
                                            button type="button" disabled
                                                title="Its job is not recorded yet: start a runtime of this version that declares it" {
                                                "Run now"
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        })
    }
    .await;
    ctx.render("Cron", result)
}

/// The kind and job of a "Run now" that redirected here.
fn ran(q: &Pairs) -> Option<(String, i64)> {
    if q.get("done")? != "run" {
        return None;
    }
    Some((q.get("kind")?.to_owned(), q.get("job")?.parse().ok()?))
}

/// The "Run now" button of a schedule: enqueues one job of the kind now.
fn run_now(ctx: &Ctx, kind: &str) -> Markup {
    html! {
        form.inline method="post" action=(ctx.url(&format!("/cron/{}/run", enc_path(kind))))
            data-confirm=(format!("Run {kind} now, outside its schedule?")) {
            (ctx.csrf_field())
            button type="submit" { "Run now" }
        }
    }
}
