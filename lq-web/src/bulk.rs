//! `POST /jobs/bulk`: retry, cancel or delete the selected jobs, or every job
//! a filter matches. Deleting a selection asks first, on the server. For a
//! filter the server counts first and asks for a confirmation naming the
//! number; the confirmed action acts on at most that many, among the jobs that
//! existed when it was counted (ids up to the newest counted). An action that
//! ran redirects to its outcome ([`crate::bulk_result`]), which lists each job
//! it refused with the reason: reloading it runs nothing again.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use axum::{extract::State, response::Response, Extension};
use lq_core::{
    control::{self, BulkReport},
    sqlx::PgPool,
    JobFilter, JobState,
};
use maud::{html, Markup};

use crate::{
    actions::{refused_post, run_to_end},
    bulk_result::{self, Scope},
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
pub(crate) enum Action {
    Retry,
    Cancel,
    Delete,
    RunNow,
}

impl Action {
    pub(crate) fn parse(s: Option<&str>) -> Result<Self, PageError> {
        match s {
            Some("retry") => Ok(Self::Retry),
            Some("cancel") => Ok(Self::Cancel),
            Some("delete") => Ok(Self::Delete),
            Some("run-now") => Ok(Self::RunNow),
            other => Err(PageError::bad_request(format!(
                "unknown bulk action {:?}: use retry, cancel, delete or run-now",
                other.unwrap_or("")
            ))),
        }
    }

    pub(crate) fn verb(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Cancel => "cancel",
            Self::Delete => "delete",
            Self::RunNow => "run-now",
        }
    }

    /// The verb as a page says it ("run now", not the form's "run-now").
    pub(crate) fn words(self) -> &'static str {
        match self {
            Self::RunNow => "run now",
            other => other.verb(),
        }
    }

    pub(crate) fn past(self) -> &'static str {
        match self {
            Self::Retry => "Retried",
            Self::Cancel => "Cancelled",
            Self::Delete => "Deleted",
            Self::RunNow => "Made due now",
        }
    }

    /// The participle lq-core's refusals use ("cannot be retried").
    pub(crate) fn done(self) -> &'static str {
        match self {
            Self::Retry => "retried",
            Self::Cancel => "cancelled",
            Self::Delete => "deleted",
            Self::RunNow => "run now",
        }
    }

    /// The lq-core bulk call of this action on the jobs `filter` matches.
    pub(crate) async fn matching(
        self,
        pool: &PgPool,
        filter: &JobFilter,
        limit: Option<u64>,
    ) -> Result<BulkReport, lq_core::Error> {
        match self {
            Self::Retry => control::retry_matching(pool, filter, limit).await,
            Self::Cancel => control::cancel_matching(pool, filter, limit).await,
            Self::Delete => control::delete_matching(pool, filter, limit).await,
            Self::RunNow => control::run_now_matching(pool, filter, limit).await,
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
            let report = self.matching(&pool, &filter, limit).await;
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
    match handle(&ctx, &sh, &form).await {
        Ok(Answer::Page(body)) => ctx.page("Bulk action", body),
        Ok(Answer::Done(r)) => r,
        Err(e) => ctx.error(e),
    }
}

/// What a bulk POST answers: a page that changed nothing (a question, a
/// count of nothing), or the redirect to the outcome of an action that ran.
enum Answer {
    Page(Markup),
    Done(Response),
}

async fn handle(ctx: &Ctx, sh: &Arc<Shared>, form: &Pairs) -> Result<Answer, PageError> {
    // A request refused before the action runs is audit-logged here; the
    // action's own outcome is logged by `run_to_end`.
    let refuse = |e: PageError| refused_post(ctx, "bulk", e);
    let bad = |e: params::ParamError| refuse(PageError::bad_request(e.to_string()));
    let action = Action::parse(form.get("action")).map_err(refuse)?;
    let selected: Vec<(i64, Option<JobState>)> = form
        .all("ids")
        .map(params::parse_selected)
        .collect::<Result<_, _>>()
        .map_err(bad)?;
    let ids: Vec<i64> = selected.iter().map(|(id, _)| *id).collect();
    // The state of the tab the jobs were picked on: a job that left it since
    // is not acted on.
    let shown = form
        .get("state")
        .map(|v| params::parse_tab(v).map(|(state, _)| state))
        .transpose()
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
                return Ok(Answer::Page(confirm_selected(ctx, &selected, shown)));
            };
            let confirmed = params::parse_count("confirm", confirmed).map_err(bad)?;
            if confirmed != ids.len() as u64 {
                return Err(refuse(PageError::bad_request(format!(
                    "the confirmation names {confirmed} jobs, the selection {}: select again",
                    ids.len()
                ))));
            }
        }
        // Each job in the state its row showed (or the tab's): one action per
        // state, so a job that left its state since is not acted on.
        let mut groups: Vec<(Option<JobState>, Vec<i64>)> = Vec::new();
        for (id, state) in &selected {
            let state = state.or(shown);
            match groups.iter_mut().find(|(s, _)| *s == state) {
                Some((_, ids)) => ids.push(*id),
                None => groups.push((state, vec![*id])),
            }
        }
        let mut total = BulkReport::default();
        let mut failure = None;
        for (state, ids) in groups {
            let filter = state.into_iter().fold(
                ids.iter().copied().fold(JobFilter::new(), JobFilter::id),
                JobFilter::state,
            );
            let target = match state {
                Some(s) => format!("{} selected {s} jobs {ids:?}", ids.len()),
                None => format!("{} selected jobs {ids:?}", ids.len()),
            };
            let states = filter.states.clone();
            match action.run(ctx, sh, filter, None, target).await {
                Ok(mut r) => {
                    let reached = unreached(&sh.pool, &r, &ids, &states, action).await;
                    match reached {
                        Ok(mut refused) => {
                            r.matched += refused.len() as u64;
                            r.refused.append(&mut refused);
                            merge(&mut total, r);
                        }
                        // Done, but not every job accounted for: say what was done.
                        Err(e) => {
                            merge(&mut total, r);
                            failure = Some(e);
                            break;
                        }
                    }
                }
                Err(lq_core::Error::BulkStopped { report, source, .. }) => {
                    merge(&mut total, *report);
                    failure = Some(*source);
                    break;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let result = match failure {
            None => Ok(total),
            Some(e) if total.matched == 0 && total.done.is_empty() => Err(e),
            Some(e) => Err(lq_core::Error::BulkStopped {
                action: action.done(),
                report: Box::new(total),
                source: Box::new(e),
            }),
        };
        return finished(ctx, action, &Scope::Selected(shown), result);
    }
    if form.get("all_matching") != Some("1") {
        return Err(refuse(PageError::bad_request(
            "no job selected: tick jobs in the list, or act on all matching",
        )));
    }
    let filter = Filter::parse(form, sh.config.redact.is_some()).map_err(bad)?;
    let described = filter.describe();
    let Some(confirmed) = form.get("confirm") else {
        return confirmation(ctx, sh, action, &filter)
            .await
            .map(Answer::Page);
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
    finished(ctx, action, &Scope::Matching(&filter, upto), result)
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
            h1 { "Nothing to " (action.words()) }
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
    let (verb, words) = (action.verb(), action.words());
    let question = format!(
        "{}{} {} {} matching {}?",
        words[..1].to_uppercase(),
        &words[1..],
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
                "Yes, " (words) " " (layout::count(n)) " jobs"
            }
            " "
            a href=(back) { "No, go back" }
        }
    })
}

/// `more`'s counts and jobs added to `total`'s (the selection's actions, one
/// per state).
fn merge(total: &mut BulkReport, mut more: BulkReport) {
    total.matched += more.matched;
    total.done.append(&mut more.done);
    total.refused.append(&mut more.refused);
}

/// Asks before deleting the selected jobs, naming how many.
fn confirm_selected(
    ctx: &Ctx,
    selected: &[(i64, Option<JobState>)],
    shown: Option<JobState>,
) -> Markup {
    let n = selected.len() as u64;
    let noun = if n == 1 { "job" } else { "jobs" };
    html! {
        h1 #confirm-question { "Delete " (layout::count(n)) " selected " (noun) " for good?" }
        p { (layout::DELETE_IS_FOR_GOOD) }
        form.confirm method="post" action=(ctx.url("/jobs/bulk")) {
            (ctx.csrf_field())
            input type="hidden" name="action" value="delete";
            @if let Some(s) = shown {
                input type="hidden" name="state" value=(s.as_str());
            }
            @for (id, state) in selected {
                @match state {
                    Some(s) => input type="hidden" name="ids" value={ (id) ":" (s.as_str()) };,
                    None => input type="hidden" name="ids" value=(id);,
                }
            }
            button.danger type="submit" name="confirm" value=(n) {
                "Yes, delete " (layout::count(n)) " " (noun)
            }
            " "
            a href=(ctx.url("/jobs")) { "No, go back" }
        }
    }
}

/// Why each of `selected` that `r` does not account for was not acted on: it
/// left `states` (a dead job retried, a queued one started, since the page
/// showed it) or it is gone (deleted or pruned), as `lq` says "no job N". A
/// selection never shrinks without a word.
pub(crate) async fn unreached(
    pool: &PgPool,
    r: &BulkReport,
    selected: &[i64],
    states: &[JobState],
    action: Action,
) -> Result<Vec<(i64, lq_core::Error)>, lq_core::Error> {
    let seen: HashSet<i64> = (r.done.iter().copied())
        .chain(r.refused.iter().map(|(id, _)| *id))
        .collect();
    let mut gone: Vec<i64> = selected
        .iter()
        .copied()
        .filter(|id| !seen.contains(id))
        .collect();
    gone.sort_unstable();
    gone.dedup();
    if gone.is_empty() {
        return Ok(Vec::new());
    }
    // Where they are now (an id two jobs share is listed twice: either tells).
    let lookup = gone.iter().copied().fold(JobFilter::new(), JobFilter::id);
    let limit = i64::try_from(gone.len() * 2).unwrap_or(i64::MAX);
    let now: HashMap<i64, JobState> = control::list(pool, &lookup, limit)
        .await?
        .into_iter()
        .map(|row| (row.id, row.state))
        .collect();
    Ok(gone
        .into_iter()
        .map(|id| {
            let action = action.done();
            let why = match now.get(&id) {
                None => lq_core::Error::NotFound { id },
                Some(&state) if !states.contains(&state) => {
                    lq_core::Error::LeftFilter { id, state, action }
                }
                // Back in the state shown by now: it was elsewhere when acted on.
                Some(&state) => lq_core::Error::WrongState { id, state, action },
            };
            (id, why)
        })
        .collect())
}

/// The answer to a bulk action that ran: the redirect to its outcome (also
/// for one that stopped partway, whose batches before the failure stay done),
/// or the error page of one that changed nothing.
fn finished(
    ctx: &Ctx,
    action: Action,
    scope: &Scope<'_>,
    result: Result<BulkReport, lq_core::Error>,
) -> Result<Answer, PageError> {
    match result {
        Ok(r) => Ok(Answer::Done(bulk_result::redirect(
            ctx, action, scope, &r, None,
        ))),
        Err(lq_core::Error::BulkStopped { report, source, .. }) => {
            let status = PageError::from(*source).status;
            let to = bulk_result::redirect(ctx, action, scope, &report, Some(status));
            Ok(Answer::Done(to))
        }
        Err(e) => Err(e.into()),
    }
}
