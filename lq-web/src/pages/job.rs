//! `/jobs/{id}`: one job — its fields, its payload and metadata (hidden until
//! asked for), every failed attempt's error, and the actions its state allows
//! (run now, for a queued job not yet due).

use std::sync::Arc;

use axum::{
    extract::{Path, State},
    http::Uri,
    response::Response,
};
use lq_core::{control, control::JobRow, JobState};
use maud::{html, Markup};

use crate::{
    context::Ctx,
    error::PageError,
    layout,
    params::{self, Pairs},
    Shared,
};

pub(crate) async fn page(
    ctx: Ctx,
    State(sh): State<Arc<Shared>>,
    Path(id): Path<String>,
    uri: Uri,
) -> Response {
    let result = async {
        let id = params::parse_id("the job id", &id)
            .map_err(|e| PageError::bad_request(e.to_string()))?;
        let job = control::get(&sh.pool, id).await?;
        let q = Pairs::from_query(&uri);
        Ok(body(&ctx, &sh, &job, q.get("done")))
    }
    .await;
    ctx.render("Job", result)
}

fn body(ctx: &Ctx, sh: &Shared, j: &JobRow, done: Option<&str>) -> Markup {
    let flash = done.and_then(|d| match d {
        "retried" => Some(format!("Job {} queued to run again.", j.id)),
        "cancelled" if j.state == JobState::Running => {
            Some(format!("Cancellation of job {} requested.", j.id))
        }
        "cancelled" => Some(format!("Job {} cancelled.", j.id)),
        "run-now" if j.state == JobState::Queued => Some(format!(
            "Job {} is due now: it runs when a worker of queue {} is free.",
            j.id, j.queue
        )),
        _ => None,
    });
    html! {
        (layout::flash(flash))
        h1 { "Job " (j.id) " " (layout::state_badge(j.state)) }
        @if ctx.can_act() { (actions(ctx, j)) }
        table.fields {
            tr { th { "kind" } td { a href={ (ctx.url("/jobs")) "?kind=" (urlenc(&j.kind)) } { (j.kind) } } }
            tr { th { "queue" } td { a href={ (ctx.url("/jobs")) "?queue=" (urlenc(&j.queue)) } { (j.queue) } } }
            tr { th { "priority" } td { (j.priority) } }
            tr { th { "attempts" } td { (j.attempts) " of " (j.max_attempts) } }
            tr { th { "unique key" } td { (unique_key_text(sh, j)) } }
            tr { th { "created" } td { (layout::time(j.created_at)) } }
            tr { th { "run at" } td { (layout::time(j.run_at)) } }
            tr { th { "started" } td { (layout::opt_time(j.started_at)) } }
            tr { th { "finished" } td { (layout::opt_time(j.finished_at)) } }
            tr { th { "worker" } td { (j.lease_owner.as_deref().unwrap_or("–")) } }
            tr { th { "lease expires" } td { (layout::opt_time(j.lease_expires_at)) } }
            tr { th { "cancel requested" } td { (layout::opt_time(j.cancel_requested_at)) } }
        }
        details #payload {
            summary { "Payload" }
            pre { (payload_text(sh, j)) }
        }
        @if let Some(meta) = &j.meta {
            details #meta {
                summary { "Metadata" }
                pre { (pretty(meta.get())) }
            }
        }
        h2 { "Errors (" (j.errors.len()) ")" }
        @if j.errors.is_empty() {
            p.empty { "No failed attempt." }
        } @else {
            table.errors {
                thead { tr { th.num { "attempt" } th { "at" } th { "worker" } th { "error" } } }
                tbody {
                    @for e in j.errors.iter().rev() {
                        tr {
                            td.num { (e.attempt) }
                            td { (layout::time(e.at)) }
                            td { (e.worker.as_deref().unwrap_or("–")) }
                            td { pre.error-text { (e.error) } }
                        }
                    }
                }
            }
        }
    }
}

/// The buttons this job's state allows (the server checks again on POST).
fn actions(ctx: &Ctx, j: &JobRow) -> Markup {
    // This host's clock only chooses whether to offer the button: the server
    // makes the job due by the database's.
    let now = chrono::Utc::now();
    let form = |action: &str, label: &str, confirm: Option<&str>, danger: bool| {
        html! {
            form.inline method="post" action=(ctx.url(&format!("/jobs/{}/{action}", j.id))) data-confirm=[confirm] {
                (ctx.csrf_field())
                // What the page showed: a job that moved since is left alone.
                input type="hidden" name="state" value=(j.state.as_str());
                button.danger[danger] type="submit" { (label) }
            }
        }
    };
    html! {
        div.actions {
            @if matches!(j.state, JobState::Dead | JobState::Cancelled) {
                (form("retry", "Retry now", None, false))
            }
            @if j.state == JobState::Queued && j.run_at > now {
                // Scheduled, snoozed, or waiting out a retry's backoff.
                (form("run-now", "Run now", None, false))
            }
            @if j.state.is_live() {
                (form("cancel", "Cancel", Some("Cancel this job?"), false))
            }
            @if j.state != JobState::Running {
                // The server asks before a delete.
                (form("delete", "Delete", None, true))
            }
        }
    }
}

/// The unique key as shown: hidden while payloads are redacted, since a key is a
/// template over payload fields.
fn unique_key_text<'a>(sh: &Shared, j: &'a JobRow) -> &'a str {
    match (&j.unique_key, sh.config.redact) {
        (None, _) => "–",
        (Some(_), Some(_)) => crate::redacted_keys::HIDDEN_KEY,
        (Some(key), None) => key,
    }
}

/// The payload as shown: redacted when a hook is set, pretty-printed.
fn payload_text(sh: &Shared, j: &JobRow) -> String {
    match sh.config.redact {
        None => pretty(j.payload.get()),
        Some(redact) => match j.payload_value() {
            Ok(mut v) => {
                redact(&j.kind, &mut v);
                serde_json::to_string_pretty(&v).unwrap_or_default()
            }
            Err(_) => "(not shown: too deep to decode for redaction)".to_owned(),
        },
    }
}

/// Indented JSON when it decodes, the stored text otherwise.
fn pretty(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_owned())
}

fn urlenc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
