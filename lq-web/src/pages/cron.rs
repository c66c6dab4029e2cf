//! `/cron`: every recurring kind's schedule — expression, zone, catch-up,
//! last tick and next fire.

use std::sync::Arc;

use axum::{extract::State, response::Response};
use lq_core::control;
use maud::html;

use crate::{context::Ctx, error::PageError, layout, Shared};

pub(crate) async fn page(ctx: Ctx, State(sh): State<Arc<Shared>>) -> Response {
    let result = async {
        let schedules = control::cron_schedules(&sh.pool).await?;
        Ok::<_, PageError>(html! {
            h1 { "Cron" }
            @if schedules.is_empty() {
                p.empty { "No recurring job has been scheduled." }
            } @else {
                table.cron {
                    thead { tr {
                        th { "kind" } th { "expression" } th { "zone" } th { "catch-up" } th { "queue" }
                        th { "last tick" } th { "next fire" } th.num { "last job" } th { "declared by" } th { "checked" }
                    } }
                    tbody {
                        @for s in &schedules {
                            tr data-kind=(s.kind) {
                                td { a href={ (ctx.url("/jobs")) "?kind=" (form_urlencoded::byte_serialize(s.kind.as_bytes()).collect::<String>()) } { (s.kind) } }
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
