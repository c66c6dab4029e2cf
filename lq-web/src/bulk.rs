//! `POST /jobs/bulk`: retry, cancel or delete the selected jobs, or every job
//! a filter matches. Deleting a selection asks first, on the server. For a
//! filter the server counts first and asks for a confirmation naming the
//! number; the confirmed action acts on at most that many, among the jobs that
//! existed when it was counted (ids up to the newest counted), and lists each
//! job it refused with the reason.

use std::sync::Arc;

use axum::{extract::State, response::Response, Extension};
use lq_core::{
    control::{self, BulkReport},
    JobFilter,
};
use maud::{html, Markup};

use crate::{
    actions::{refused_post, run_to_end},
    context::Ctx,
    error::PageError,
    guard::FormBody,
    layout,
    params::{self, Filter, Pairs},
    redacted_keys, Shared,
};

/// Most jobs one selection may name.
const MAX_SELECTED: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Retry,
    Cancel,
    Delete,
}

impl Action {
    fn parse(s: Option<&str>) -> Result<Self, PageError> {
        match s {
            Some("retry") => Ok(Self::Retry),
            Some("cancel") => Ok(Self::Cancel),
            Some("delete") => Ok(Self::Delete),
            other => Err(PageError::bad_request(format!(
                "unknown bulk action {:?}: use retry, cancel or delete",
                other.unwrap_or("")
            ))),
        }
    }

    fn verb(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Cancel => "cancel",
            Self::Delete => "delete",
        }
    }

    fn past(self) -> &'static str {
        match self {
            Self::Retry => "Retried",
            Self::Cancel => "Cancelled",
            Self::Delete => "Deleted",
        }
    }

    /// Runs the action on the jobs `filter` matches (at most `limit`) to its
    /// end, audit-logged as done to `target`, whether or not the request waits.
    async fn run(
        self,
        ctx: &Ctx,
        sh: &Arc<Shared>,
        filter: JobFilter,
        limit: Option<u64>,
        target: String,
    ) -> Result<BulkReport, lq_core::Error> {
        let pool = sh.pool.clone();
        let redacted = sh.config.redact.is_some();
        let report = run_to_end(ctx, self.verb(), target, async move {
            let report = match self {
                Self::Retry => control::retry_matching(&pool, &filter, limit).await,
                Self::Cancel => control::cancel_matching(&pool, &filter, limit).await,
                Self::Delete => control::delete_matching(&pool, &filter, limit).await,
            };
            report
                .map(|r| redacted_keys::report_of(r, redacted))
                .map_err(|e| redacted_keys::error(e, redacted))
        })
        .await;
        // The page it returns to counts what the action left.
        sh.counts.forget_all();
        report
    }
}

pub(crate) async fn post(
    ctx: Ctx,
    State(sh): State<Arc<Shared>>,
    Extension(FormBody(form)): Extension<FormBody>,
) -> Response {
    let result = handle(&ctx, &sh, &form).await;
    ctx.render("Bulk action", result)
}

async fn handle(ctx: &Ctx, sh: &Arc<Shared>, form: &Pairs) -> Result<Markup, PageError> {
    // A request refused before the action runs is audit-logged here; the
    // action's own outcome is logged by `run_to_end`.
    let refuse = |e: PageError| refused_post(ctx, "bulk", e);
    let bad = |e: params::ParamError| refuse(PageError::bad_request(e.to_string()));
    let action = Action::parse(form.get("action")).map_err(refuse)?;
    let ids: Vec<i64> = form
        .all("ids")
        .map(|v| params::parse_id("ids", v))
        .collect::<Result<_, _>>()
        .map_err(bad)?;
    if !ids.is_empty() {
        if ids.len() > MAX_SELECTED {
            return Err(refuse(PageError::bad_request(format!(
                "{} jobs selected: select at most {MAX_SELECTED}, or act on all matching",
                ids.len()
            ))));
        }
        if action == Action::Delete {
            // Deleting is for good: the server asks, whatever the browser did.
            let Some(confirmed) = form.get("confirm") else {
                return Ok(confirm_selected(ctx, &ids));
            };
            let confirmed = params::parse_count("confirm", confirmed).map_err(bad)?;
            if confirmed != ids.len() as u64 {
                return Err(refuse(PageError::bad_request(format!(
                    "the confirmation names {confirmed} jobs, the selection {}: select again",
                    ids.len()
                ))));
            }
        }
        let filter = ids.iter().copied().fold(JobFilter::new(), JobFilter::id);
        let target = format!("{} selected jobs {ids:?}", ids.len());
        let result = action.run(ctx, sh, filter, None, target).await;
        let result = result.map(|r| with_vanished(r, &ids));
        return finished(ctx, action, "the selected jobs", result);
    }
    if form.get("all_matching") != Some("1") {
        return Err(refuse(PageError::bad_request(
            "no job selected: tick jobs in the list, or act on all matching",
        )));
    }
    let filter = Filter::parse(form, sh.config.redact.is_some()).map_err(bad)?;
    let described = filter.describe();
    let Some(confirmed) = form.get("confirm") else {
        return confirmation(ctx, sh, action, &filter).await;
    };
    let confirmed = params::parse_count("confirm", confirmed).map_err(bad)?;
    let upto = form
        .get("upto")
        .map(|v| params::parse_id("upto", v))
        .transpose()
        .map_err(bad)?
        .ok_or_else(|| {
            refuse(PageError::bad_request(
                "the confirmation lacks upto: count again",
            ))
        })?;
    let mut pinned = filter.to_job_filter();
    pinned.max_id = Some(upto);
    let target = format!("{confirmed} jobs matching {described} (ids up to {upto})");
    let result = action.run(ctx, sh, pinned, Some(confirmed), target).await;
    finished(ctx, action, &format!("jobs matching {described}"), result)
}

/// Counts what the filter matches now and asks to go ahead with that number.
async fn confirmation(
    ctx: &Ctx,
    sh: &Shared,
    action: Action,
    filter: &Filter,
) -> Result<Markup, PageError> {
    let mut job_filter = filter.to_job_filter();
    let back = format!("{}?{}", ctx.url("/jobs"), filter.query(&[]));
    // The newest match first, then the count of the jobs up to it: the number
    // asked and the jobs acted on are the same set, whatever is enqueued between.
    let newest = control::list(&sh.pool, &job_filter, 1).await?;
    let Some(newest) = newest.first() else {
        return Ok(html! {
            h1 { "Nothing to " (action.verb()) }
            p { "No job matches " (filter.describe()) " now." }
            p { a href=(back) { "Back to the jobs" } }
        });
    };
    job_filter.max_id = Some(newest.id);
    let n: u64 = control::count(&sh.pool, &job_filter)
        .await?
        .iter()
        .map(|c| c.count)
        .sum();
    let verb = action.verb();
    let question = format!(
        "{}{} {} {} matching {}?",
        verb[..1].to_uppercase(),
        &verb[1..],
        layout::count(n),
        if n == 1 { "job" } else { "jobs" },
        filter.describe()
    );
    Ok(html! {
        h1 #confirm-question { (question) }
        p { "Counted just now on the server. Jobs enqueued after the count are left alone." }
        form.confirm method="post" action=(ctx.url("/jobs/bulk")) {
            (ctx.csrf_field())
            input type="hidden" name="action" value=(verb);
            input type="hidden" name="all_matching" value="1";
            @for (k, v) in filter.fields() {
                input type="hidden" name=(k) value=(v);
            }
            input type="hidden" name="upto" value=(newest.id);
            button.danger[action == Action::Delete] type="submit" name="confirm" value=(n) {
                "Yes, " (verb) " " (layout::count(n)) " jobs"
            }
            " "
            a href=(back) { "No, go back" }
        }
    })
}

/// Asks before deleting the selected jobs, naming how many.
fn confirm_selected(ctx: &Ctx, ids: &[i64]) -> Markup {
    let n = ids.len() as u64;
    let noun = if n == 1 { "job" } else { "jobs" };
    html! {
        h1 #confirm-question { "Delete " (layout::count(n)) " selected " (noun) " for good?" }
        p { (layout::DELETE_IS_FOR_GOOD) }
        form.confirm method="post" action=(ctx.url("/jobs/bulk")) {
            (ctx.csrf_field())
            input type="hidden" name="action" value="delete";
            @for id in ids {
                input type="hidden" name="ids" value=(id);
            }
            button.danger type="submit" name="confirm" value=(n) {
                "Yes, delete " (layout::count(n)) " " (noun)
            }
            " "
            a href=(ctx.url("/jobs")) { "No, go back" }
        }
    }
}

/// `r` with each selected job it did not find (deleted or pruned since the
/// list was shown) refused as not found, as `lq` says "no job N": a selection
/// never shrinks without a word.
fn with_vanished(mut r: BulkReport, selected: &[i64]) -> BulkReport {
    let seen: std::collections::HashSet<i64> = (r.done.iter().copied())
        .chain(r.refused.iter().map(|(id, _)| *id))
        .collect();
    let mut gone: Vec<i64> = selected
        .iter()
        .copied()
        .filter(|id| !seen.contains(id))
        .collect();
    gone.sort_unstable();
    gone.dedup();
    r.refused.extend(
        gone.into_iter()
            .map(|id| (id, lq_core::Error::NotFound { id })),
    );
    r
}

/// The page after a bulk action: its report, or for one that stopped partway,
/// the error page with the report of what it did before it stopped.
fn finished(
    ctx: &Ctx,
    action: Action,
    what: &str,
    result: Result<BulkReport, lq_core::Error>,
) -> Result<Markup, PageError> {
    let e = match result {
        Ok(r) => {
            return Ok(html! {
                h1 #bulk-result { (result_line(action, what, &r)) }
                (report(ctx, &r))
            })
        }
        Err(e) => e,
    };
    let done = match &e {
        lq_core::Error::BulkStopped { report: r, .. } => Some(html! {
            h2 #bulk-result { (result_line(action, what, r)) " before it stopped" }
            (report(ctx, r))
        }),
        _ => None,
    };
    let mut page = PageError::from(e);
    page.detail = done;
    Err(page)
}

/// "Cancelled 3 of 4 jobs matching queue mail".
fn result_line(action: Action, what: &str, r: &BulkReport) -> String {
    format!(
        "{} {} of {} {what}",
        action.past(),
        layout::count(r.done.len() as u64),
        layout::count(r.matched)
    )
}

/// What a bulk action did: each refusal with its reason.
fn report(ctx: &Ctx, r: &BulkReport) -> Markup {
    html! {
        @if r.refused.is_empty() {
            p { "None refused." }
        } @else {
            h2 { (layout::count(r.refused.len() as u64)) " refused" }
            table.refused {
                thead { tr { th.num { "job" } th { "reason" } } }
                tbody {
                    @for (id, why) in &r.refused {
                        tr {
                            td.num { a href=(ctx.url(&format!("/jobs/{id}"))) { (id) } }
                            td { (lq_core::chain(why)) }
                        }
                    }
                }
            }
        }
        p { a href=(ctx.url("/jobs")) { "Back to the jobs" } }
    }
}
