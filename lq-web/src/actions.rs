//! The single actions: retry, cancel, delete or run now one job; pause or resume one
//! queue; run one recurring job now. The guard has already checked access,
//! Origin and CSRF; each action is audit-logged, and a refusal is shown as a
//! page (409, 404), never a 500.
//! Deleting asks first, on the server: a POST without `confirm=yes` gets the
//! question, not the delete. A job action whose form carries `state` (the job
//! page's forms carry the state it showed) acts only on a job still in that
//! state: one that moved meanwhile is refused as having left it (409).

use std::sync::Arc;

use axum::{
    extract::{Path, State},
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    Extension,
};
use lq_core::{control, JobFilter, JobState};

use crate::{bulk::Action, context::Ctx, error::PageError, guard::FormBody, params, Shared};

/// `POST /jobs/{id}/{retry|cancel|delete|run-now}`.
pub(crate) async fn job(
    ctx: Ctx,
    State(sh): State<Arc<Shared>>,
    Path((id, action)): Path<(String, String)>,
    Extension(FormBody(form)): Extension<FormBody>,
) -> Response {
    let id = match params::parse_id("the job id", &id) {
        Ok(id) => id,
        Err(e) => {
            return ctx.error(refused_post(
                &ctx,
                &action,
                PageError::bad_request(e.to_string()),
            ))
        }
    };
    let shown = match form.get("state").map(params::parse_state).transpose() {
        Ok(s) => s,
        Err(e) => {
            return ctx.error(refused_post(
                &ctx,
                &action,
                PageError::bad_request(e.to_string()),
            ))
        }
    };
    if action == "delete" && form.get("confirm") != Some("yes") {
        return ctx.render("Delete job", Ok(confirm_delete(&ctx, id, shown)));
    }
    let result = match (action.as_str(), shown) {
        ("retry", None) => control::retry_now(&sh.pool, id).await.map(|()| "retried"),
        ("cancel", None) => control::cancel(&sh.pool, id).await.map(|_| "cancelled"),
        ("retry", Some(_)) => one(&sh, id, shown, Action::Retry).await.map(|()| "retried"),
        ("cancel", Some(_)) => (one(&sh, id, shown, Action::Cancel).await).map(|()| "cancelled"),
        ("delete", _) => one(&sh, id, shown, Action::Delete)
            .await
            .map(|()| "deleted"),
        ("run-now", None) => control::run_now(&sh.pool, id).await.map(|()| "run-now"),
        ("run-now", Some(_)) => (one(&sh, id, shown, Action::RunNow).await).map(|()| "run-now"),
        (other, _) => {
            let e = PageError::not_found(format!(
                "there is no action {other:?}: use retry, cancel, delete or run-now"
            ));
            return ctx.error(refused_post(&ctx, other, e));
        }
    };
    let redacted = sh.config.redact.is_some();
    let result = result.map_err(|e| crate::redacted_keys::error(e, redacted));
    audit(&ctx, &action, &format!("job {id}"), &result);
    sh.counts.forget_all();
    match result {
        Ok("deleted") => see_other(&ctx.url(&format!("/jobs?done=deleted&job={id}"))),
        Ok(done) => see_other(&ctx.url(&format!("/jobs/{id}?done={done}"))),
        Err(e) => refused(&ctx, id, e),
    }
}

/// Asks before deleting job `id`; the answer posts again with `confirm=yes`
/// (and the state the job page showed).
fn confirm_delete(ctx: &Ctx, id: i64, shown: Option<JobState>) -> maud::Markup {
    maud::html! {
        h1 #confirm-question { "Delete job " (id) " for good?" }
        p { (crate::layout::DELETE_IS_FOR_GOOD) }
        form.confirm method="post" action=(ctx.url(&format!("/jobs/{id}/delete"))) {
            (ctx.csrf_field())
            @if let Some(s) = shown {
                input type="hidden" name="state" value=(s.as_str());
            }
            button.danger type="submit" name="confirm" value="yes" { "Yes, delete job " (id) }
            " "
            a href=(ctx.url(&format!("/jobs/{id}"))) { "No, go back" }
        }
    }
}

/// Acts on job `id` through the bulk call (the one place deletes are
/// written), only while it is in the state `shown` when given, turning its
/// per-job refusal (or its having left that state) into the error.
async fn one(
    sh: &Shared,
    id: i64,
    shown: Option<JobState>,
    action: Action,
) -> Result<(), lq_core::Error> {
    let filter = shown
        .into_iter()
        .fold(JobFilter::new().id(id), JobFilter::state);
    let report = action.matching(&sh.pool, &filter, None).await?;
    if report.done.contains(&id) {
        return Ok(());
    }
    let unreached =
        crate::bulk::unreached(&sh.pool, &report, &[id], &filter.states, action).await?;
    let mut refused = report.refused;
    refused.extend(unreached);
    match refused.pop() {
        Some((_, why)) => Err(why),
        None => Err(lq_core::Error::NotFound { id }),
    }
}

/// A refused job action, with the reason and a link back to the job.
fn refused(ctx: &Ctx, id: i64, e: lq_core::Error) -> Response {
    let page = PageError::from(e);
    let title = page.status.canonical_reason().unwrap_or("Refused");
    let body = maud::html! {
        h1 { (title) }
        p.error-message role="alert" { (page.message) }
        p { a href=(ctx.url(&format!("/jobs/{id}"))) { "Back to job " (id) } }
    };
    ctx.page_with(page.status, title, body)
}

/// `POST /queues/{name}/{pause|resume}`.
pub(crate) async fn queue(
    ctx: Ctx,
    State(sh): State<Arc<Shared>>,
    Path((name, action)): Path<(String, String)>,
    Extension(FormBody(form)): Extension<FormBody>,
) -> Response {
    let by = format!("lq-web: {}", ctx.user.as_deref().unwrap_or("dashboard"));
    let result = match action.as_str() {
        "pause" => control::pause_queue(&sh.pool, &name, &by).await,
        "resume" => control::resume_queue(&sh.pool, &name).await,
        other => {
            let e =
                PageError::not_found(format!("there is no action {other:?}: use pause or resume"));
            return ctx.error(refused_post(&ctx, other, e));
        }
    };
    audit(&ctx, &action, &format!("queue {name}"), &result);
    sh.counts.forget_all();
    let back = match form.get("back") {
        Some("overview") => "/",
        _ => "/queues",
    };
    match result {
        Ok(changed) => {
            let done = if changed {
                action.as_str()
            } else {
                "unchanged"
            };
            let q = form_urlencoded::Serializer::new(String::new())
                .append_pair("done", done)
                .append_pair("queue", &name)
                .finish();
            see_other(&format!("{}?{q}", ctx.url(back)))
        }
        Err(e) => ctx.error(e.into()),
    }
}

/// `POST /cron/{kind}/run`: enqueues one job of recurring `kind` now.
pub(crate) async fn cron(
    ctx: Ctx,
    State(sh): State<Arc<Shared>>,
    Path((kind, action)): Path<(String, String)>,
) -> Response {
    if action != "run" {
        let e = PageError::not_found(format!("there is no action {action:?}: use run"));
        return ctx.error(refused_post(&ctx, &action, e));
    }
    let by = format!("lq-web: {}", ctx.user.as_deref().unwrap_or("dashboard"));
    let result = control::cron_run_now(&sh.pool, &kind, &by).await;
    let redacted = sh.config.redact.is_some();
    let result = result.map_err(|e| crate::redacted_keys::error(e, redacted));
    audit(&ctx, "run", &format!("cron {kind}"), &result);
    sh.counts.forget_all();
    match result {
        Ok(id) => {
            let q = form_urlencoded::Serializer::new(String::new())
                .append_pair("done", "run")
                .append_pair("kind", &kind)
                .append_pair("job", &id.to_string())
                .finish();
            see_other(&format!("{}?{q}", ctx.url("/cron")))
        }
        Err(e) => ctx.error(e.into()),
    }
}

/// Runs a bulk action in a task of its own, and audit-logs its outcome there.
/// hyper drops a request's future when the client goes away, so a browser or a
/// proxy giving up on a long action would otherwise stop it between two
/// batches, with no audit line for the batches already done. In its own task
/// the action goes on to its end and is logged; the page waits for it.
pub(crate) async fn run_to_end<T: Send + 'static>(
    ctx: &Ctx,
    action: &'static str,
    target: String,
    work: impl std::future::Future<Output = Result<T, lq_core::Error>> + Send + 'static,
) -> Result<T, lq_core::Error> {
    let (user, access) = (ctx.user.clone(), ctx.access);
    // The request's bound, which a spawned task does not inherit.
    let bound = lq_core::control::timeout();
    let task = tokio::spawn(async move {
        let result = lq_core::control::with_timeout(bound, work).await;
        audit_as(user.as_deref(), access, action, &target, &result);
        result
    });
    match task.await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Cancelled: only when the tokio runtime shuts down, and then no
        // response is sent anyway.
        Err(_) => std::future::pending().await,
    }
}

/// Logs an action on `target` and its outcome to `lq_web::audit`.
pub(crate) fn audit<T>(ctx: &Ctx, action: &str, target: &str, result: &Result<T, lq_core::Error>) {
    audit_as(ctx.user.as_deref(), ctx.access, action, target, result);
}

/// Logs a POST refused before its action ran (a bad id, an unknown action, a
/// confirmation that does not match) to `lq_web::audit`, and hands `e` back.
pub(crate) fn refused_post(ctx: &Ctx, action: &str, e: PageError) -> PageError {
    log_refusal(
        ctx.user.as_deref(),
        ctx.access,
        action,
        &ctx.path,
        &e.message,
    );
    e
}

/// The audit line of a refused POST: `action` on `target`, and why.
pub(crate) fn log_refusal(
    user: Option<&str>,
    access: crate::Access,
    action: &str,
    target: &str,
    why: &str,
) {
    audit_line(user, access, action, target, &format!("refused: {why}"));
}

/// [`audit`] for an action that outlives its request's context.
fn audit_as<T>(
    user: Option<&str>,
    access: crate::Access,
    action: &str,
    target: &str,
    result: &Result<T, lq_core::Error>,
) {
    let outcome = match result {
        Ok(_) => "done".to_owned(),
        Err(e @ lq_core::Error::BulkStopped { .. }) => {
            format!("partly done: {}", lq_core::chain(e))
        }
        Err(e) => format!("refused: {}", lq_core::chain(e)),
    };
    audit_line(user, access, action, target, &outcome);
}

/// One line to the `lq_web::audit` target: who did `action` to `target`, and
/// how it ended (`done`, `partly done: …` or `refused: …`).
fn audit_line(
    user: Option<&str>,
    access: crate::Access,
    action: &str,
    target: &str,
    outcome: &str,
) {
    tracing::info!(
        target: "lq_web::audit",
        action,
        target,
        user = user.unwrap_or("-"),
        access = access.as_str(),
        outcome,
        "dashboard action"
    );
}

/// 303 See Other to `location`.
pub(crate) fn see_other(location: &str) -> Response {
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, location.to_owned())],
    )
        .into_response()
}
