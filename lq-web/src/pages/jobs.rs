//! `/jobs`: jobs by state with filters and keyset paging, each row selectable
//! for a bulk action, and the same actions for everything the filter matches.

use std::{collections::BTreeMap, sync::Arc};

use axum::{extract::State, http::Uri, response::Response};
use lq_core::{control, control::JobRow, JobState, Readiness};
use maud::{html, Markup};

use crate::{
    context::Ctx,
    error::PageError,
    layout,
    params::{self, Filter, Pairs, READINESS, STATES},
    Shared,
};

/// Jobs per page.
pub(crate) const PAGE: i64 = 50;

/// Longest last-error text shown in a row.
const ERROR_PREVIEW_CHARS: usize = 90;

pub(crate) async fn page(ctx: Ctx, State(sh): State<Arc<Shared>>, uri: Uri) -> Response {
    let result = body(&ctx, &sh, &Pairs::from_query(&uri)).await;
    ctx.render("Jobs", result)
}

async fn body(ctx: &Ctx, sh: &Shared, q: &Pairs) -> Result<Markup, PageError> {
    let redacted = sh.config.redact.is_some();
    let filter = Filter::parse(q, redacted).map_err(|e| PageError::bad_request(e.to_string()))?;
    let before = q
        .get("before")
        .map(|v| params::parse_id("before", v))
        .transpose()
        .map_err(|e| PageError::bad_request(e.to_string()))?;
    let mut listed = filter.to_job_filter();
    listed.before_id = before;
    let rows = control::list(&sh.pool, &listed, PAGE).await?;
    // Counts per state for the tabs (the filter without its state), each
    // exact up to a cap: `more` past it.
    let mut per_state: BTreeMap<&'static str, Tally> = BTreeMap::new();
    for c in sh
        .counts
        .count_by_state(&sh.pool, &filter.with_state(None).to_job_filter())
        .await?
    {
        per_state.insert(
            c.state.as_str(),
            Tally {
                n: c.count,
                more: c.more,
            },
        );
    }
    let all = Tally {
        n: per_state.values().map(|t| t.n).sum(),
        more: per_state.values().any(|t| t.more),
    };
    let of = |s: JobState| per_state.get(s.as_str()).copied().unwrap_or_default();
    // On the queued tab, the queued jobs due and not yet due, each a sub-tab.
    let mut parts = Vec::new();
    if filter.state == Some(JobState::Queued) {
        for r in READINESS {
            let only = filter.with_readiness(Some(r)).to_job_filter();
            let queued = sh.counts.count_by_state(&sh.pool, &only).await?;
            let n = (queued.iter().find(|c| c.state == JobState::Queued)).map_or(
                Tally::default(),
                |c| Tally {
                    n: c.count,
                    more: c.more,
                },
            );
            parts.push((r, n));
        }
    }
    let matching = match filter.readiness {
        Some(r) => (parts.iter().find(|(p, _)| *p == r)).map_or(Tally::default(), |p| p.1),
        None => filter.state.map_or(all, of),
    };
    let done = q.get("done").and_then(|d| flash(d, q.get("job")));
    Ok(html! {
        (layout::flash(done))
        h1 { "Jobs" }
        (filter_form(ctx, &filter, redacted))
        nav.tabs aria-label="states" {
            (tab(ctx, &filter, None, all))
            @for s in STATES {
                (tab(ctx, &filter, Some(s), of(s)))
            }
        }
        @if !parts.is_empty() {
            nav.tabs.parts aria-label="queued jobs, due or not yet due" {
                (part(ctx, &filter, None, of(JobState::Queued)))
                @for (r, n) in &parts {
                    (part(ctx, &filter, Some(*r), *n))
                }
            }
        }
        // Above the table: acting on everything the filter matches is what an
        // operator comes for after an incident, not only on the page shown.
        @if ctx.can_act() && matching.n > 0 {
            (all_matching_form(ctx, &filter, matching))
        }
        @if rows.is_empty() {
            p.empty { "No jobs match." }
        } @else {
            (table(ctx, &rows, filter.state))
            (pager(ctx, &filter, before, &rows))
        }
    })
}

/// The outcome message of an action that redirected here.
fn flash(done: &str, job: Option<&str>) -> Option<String> {
    let job = job.and_then(|j| j.parse::<i64>().ok())?;
    match done {
        "deleted" => Some(format!("Job {job} deleted.")),
        _ => None,
    }
}

fn filter_form(ctx: &Ctx, f: &Filter, redacted: bool) -> Markup {
    let value = |v: Option<String>| v.unwrap_or_default();
    html! {
        form.filters method="get" action=(ctx.url("/jobs")) {
            @if let Some(s) = f.state {
                input type="hidden" name="state" value=(f.readiness.map_or(s.as_str(), Readiness::as_str));
            }
            label { "Queue " input name="queue" value=(value(f.queue.clone())) size="12"; }
            label { "Kind " input name="kind" value=(value(f.kind.clone())) size="16"; }
            label { "Id " input name="id" value=(value(f.id.map(|i| i.to_string()))) size="8" inputmode="numeric"; }
            label title="enqueued at least this long ago, like 15m, 2h, 7d" {
                "Older than " input name="older_than" value=(value(f.older_than.as_ref().map(|t| t.0.clone()))) size="5";
            }
            label title="enqueued at most this long ago" {
                "Newer than " input name="newer_than" value=(value(f.newer_than.as_ref().map(|t| t.0.clone()))) size="5";
            }
            @if !redacted {
                label title="the payload contains this JSON" {
                    "Payload " input name="payload" value=(value(f.payload.as_ref().map(|t| t.0.clone()))) placeholder="{\"user_id\": 42}" size="18";
                }
            }
            label title="the metadata contains this JSON" {
                "Meta " input name="meta" value=(value(f.meta.as_ref().map(|t| t.0.clone()))) placeholder="{\"tenant\": \"acme\"}" size="16";
            }
            button type="submit" { "Filter" }
            a.clear href=(ctx.url("/jobs")) { "Clear" }
        }
    }
}

/// A tab's count: exact, or at least `n` when `more`.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    n: u64,
    more: bool,
}

impl Tally {
    /// `1,234`, or `10,000+` past the cap.
    fn shown(self) -> String {
        let n = layout::count(self.n);
        if self.more {
            format!("{n}+")
        } else {
            n
        }
    }
}

fn tab(ctx: &Ctx, f: &Filter, state: Option<JobState>, n: Tally) -> Markup {
    let target = f.with_state(state);
    let label = state.map_or("all", |s| s.as_str());
    let href = format!("{}?{}", ctx.url("/jobs"), target.query(&[]));
    html! {
        a.tab.current[f.state == state] href=(href) data-state=(label) {
            (label) " " span.n { (n.shown()) }
        }
    }
}

/// A sub-tab of the queued tab: every queued job, or those due
/// (`available`), or those not yet due (`scheduled`).
fn part(ctx: &Ctx, f: &Filter, readiness: Option<Readiness>, n: Tally) -> Markup {
    let target = f.with_readiness(readiness);
    let label = readiness.map_or("all queued", Readiness::as_str);
    let href = format!("{}?{}", ctx.url("/jobs"), target.query(&[]));
    html! {
        a.tab.current[f.readiness == readiness] href=(href) data-readiness=(label) {
            (label) " " span.n { (n.shown()) }
        }
    }
}

fn table(ctx: &Ctx, rows: &[JobRow], shown: Option<JobState>) -> Markup {
    let act = ctx.can_act();
    html! {
        form #selection method="post" action=(ctx.url("/jobs/bulk")) {
            (ctx.csrf_field())
            // The tab's state: a selected job that left it since is left alone.
            @if let Some(s) = shown {
                input type="hidden" name="state" value=(s.as_str());
            }
            @if act {
                div.bulk {
                    "Selected: "
                    button type="submit" name="action" value="retry" data-confirm="Retry the selected jobs?" { "Retry" }
                    button type="submit" name="action" value="cancel" data-confirm="Cancel the selected jobs?" { "Cancel" }
                    // The server asks before a delete.
                    button.danger type="submit" name="action" value="delete" { "Delete" }
                    @if shown == Some(JobState::Queued) {
                        button type="submit" name="action" value="run-now" data-confirm="Run the selected jobs now?" { "Run now" }
                    }
                }
            }
            table.jobs {
                thead { tr {
                    @if act { th.check { input type="checkbox" #select-all aria-label="select every job on this page"; } }
                    th { "id" } th { "kind" } th { "queue" } th { "state" }
                    th.num { "attempts" } th { "run at / finished" } th { "last error" }
                } }
                tbody {
                    @for r in rows {
                        tr {
                            @if act { td.check { input type="checkbox" name="ids" value={ (r.id) ":" (r.state.as_str()) } aria-label={ "select job " (r.id) }; } }
                            td.num { a href=(ctx.url(&format!("/jobs/{}", r.id))) { (r.id) } }
                            td { (r.kind) }
                            td { (r.queue) }
                            td { (layout::state_badge(r.state)) }
                            td.num { (r.attempts) "/" (r.max_attempts) }
                            td { (layout::time(r.finished_at.unwrap_or(r.run_at))) }
                            td.err { (last_error(r)) }
                        }
                    }
                }
            }
        }
    }
}

fn last_error(r: &JobRow) -> String {
    let Some(e) = r.errors.last() else {
        return String::new();
    };
    let mut text: String = e.error.chars().take(ERROR_PREVIEW_CHARS).collect();
    if e.error.chars().count() > ERROR_PREVIEW_CHARS {
        text.push('…');
    }
    text
}

fn pager(ctx: &Ctx, f: &Filter, before: Option<i64>, rows: &[JobRow]) -> Markup {
    let older = (rows.len() as i64 == PAGE)
        .then(|| rows.last())
        .flatten()
        .map(|last| {
            let cursor = last.id.to_string();
            format!("{}?{}", ctx.url("/jobs"), f.query(&[("before", &cursor)]))
        });
    html! {
        nav.pager {
            @if before.is_some() {
                a href={ (ctx.url("/jobs")) "?" (f.query(&[])) } { "« Newest" }
            }
            @if let Some(href) = older {
                a #older href=(href) rel="next" { "Older »" }
            }
        }
    }
}

/// The form that acts on every job the filter matches (not only this page):
/// the server counts again and asks for a confirmation naming the number.
fn all_matching_form(ctx: &Ctx, f: &Filter, n: Tally) -> Markup {
    html! {
        form.all-matching method="post" action=(ctx.url("/jobs/bulk")) {
            (ctx.csrf_field())
            input type="hidden" name="all_matching" value="1";
            @for (k, v) in f.fields() {
                input type="hidden" name=(k) value=(v);
            }
            "All " (n.shown()) " matching jobs: "
            button type="submit" name="action" value="retry" { "Retry all…" }
            button type="submit" name="action" value="cancel" { "Cancel all…" }
            button.danger type="submit" name="action" value="delete" { "Delete all…" }
            @if f.state == Some(JobState::Queued) {
                button type="submit" name="action" value="run-now" { "Run all now…" }
            }
        }
    }
}
