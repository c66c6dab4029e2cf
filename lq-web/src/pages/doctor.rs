//! `/doctor`: the checks of `lq doctor` ([`control::doctor`]), each passing or
//! not, with what it found and what to do about it.

use std::sync::Arc;

use axum::{extract::State, response::Response};
use lq_core::control::{self, Check};
use maud::{html, Markup};

use crate::{context::Ctx, error::PageError, Shared};

/// The page does not refresh itself: a check counts the queued jobs no runtime
/// serves, a walk of the backlog an operator asks for, not one every few seconds.
pub(crate) async fn page(ctx: Ctx, State(sh): State<Arc<Shared>>) -> Response {
    let ctx = Ctx {
        refresh: None,
        ..ctx
    };
    let result = async {
        let checks = control::doctor(&sh.pool).await?;
        Ok::<_, PageError>(html! {
            h1 { "Doctor" }
            (summary(&checks))
            (table(&checks))
        })
    }
    .await;
    ctx.render("Doctor", result)
}

/// One line: all passing, or how many need an operator.
fn summary(checks: &[Check]) -> Markup {
    let failing = checks.iter().filter(|c| !c.ok).count();
    html! {
        p.doctor-summary {
            @if failing == 0 {
                "Every check passes."
            } @else {
                (failing) " of " (checks.len()) " checks need an operator."
            }
            " Checked as the page loaded (reload to check again); "
            code { "lq doctor" } " runs the same checks."
        }
    }
}

/// The checks, failing ones marked.
fn table(checks: &[Check]) -> Markup {
    html! {
        table.doctor {
            thead { tr { th { "check" } th { "" } th { "found" } } }
            tbody {
                @for c in checks {
                    tr data-check=(c.name) {
                        td { (c.name) }
                        td {
                            @if c.ok {
                                span.badge.state-succeeded { "ok" }
                            } @else {
                                span.badge.state-dead { "needs you" }
                            }
                        }
                        td { (c.detail) }
                    }
                }
            }
        }
    }
}
