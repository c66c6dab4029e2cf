//! `/runtimes`: the runtimes of the cluster as they report themselves, the
//! maintenance leader marked.

use std::sync::Arc;

use axum::{extract::State, response::Response};
use lq_core::control::{self, RuntimeInfo};
use maud::{html, Markup};

use crate::{context::Ctx, error::PageError, layout, Shared};

pub(crate) async fn page(ctx: Ctx, State(sh): State<Arc<Shared>>) -> Response {
    let result = async {
        let rts = control::runtimes(&sh.pool).await?;
        Ok::<_, PageError>(html! {
            h1 { "Runtimes" }
            (table(&rts))
        })
    }
    .await;
    ctx.render("Runtimes", result)
}

/// The runtimes table, also on the overview.
pub(crate) fn table(rts: &[RuntimeInfo]) -> Markup {
    html! {
        @if rts.is_empty() {
            p.empty { "No runtime has reported itself." }
        } @else {
            table.runtimes {
                thead { tr {
                    th { "runtime" } th { "host" } th.num { "pid" } th { "version" }
                    th { "queues" } th.num { "kinds" }
                    th.num title="the most connections it opens of its own" { "connections" }
                    th { "started" } th { "last beat" } th { "" }
                } }
                tbody {
                    @for rt in rts {
                        tr class=[(!rt.alive).then_some("gone")] data-runtime=(rt.id) {
                            td { (rt.id) }
                            td { (rt.host) }
                            td.num { (rt.pid) }
                            td { (rt.version) }
                            td { (rt.queues_described().join(", ")) }
                            td.num title=(rt.kinds.join(", ")) { (rt.kinds.len()) }
                            td.num {
                                @if let Some(n) = rt.connections { (n) } @else { "–" }
                            }
                            td { (layout::time(rt.started_at)) }
                            td { (layout::time(rt.heartbeat_at)) }
                            td {
                                @if rt.leader { span.badge.leader { "leader" } " " }
                                @if !rt.alive { span.badge.state-dead { "not beating" } }
                            }
                        }
                    }
                }
            }
        }
    }
}
