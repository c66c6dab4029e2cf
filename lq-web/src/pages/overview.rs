//! `/`: the overview. Per queue: available, scheduled, running and dead jobs,
//! the oldest wait, the pause, and the last hour's throughput and wait as
//! sparklines; then the runtimes with the leader marked.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use axum::{extract::State, http::Uri, response::Response};
use lq_core::{control, JobFilter, JobState, Readiness};
use maud::{html, Markup};

use crate::{
    charts,
    context::Ctx,
    error::PageError,
    layout,
    pages::{queues, runtimes},
    params::Pairs,
    Shared,
};

/// The rollup window the charts show.
const HOUR: Duration = Duration::from_secs(3600);

pub(crate) async fn page(ctx: Ctx, State(sh): State<Arc<Shared>>, uri: Uri) -> Response {
    let q = Pairs::from_query(&uri);
    let result = body(&ctx, &sh, &q).await;
    ctx.render("Overview", result)
}

async fn body(ctx: &Ctx, sh: &Shared, q: &Pairs) -> Result<Markup, PageError> {
    let live = sh.counts.queues(&sh.pool).await?;
    let mut dead: BTreeMap<String, u64> = BTreeMap::new();
    for c in sh
        .counts
        .count(&sh.pool, &JobFilter::new().state(JobState::Dead))
        .await?
    {
        *dead.entry(c.queue).or_default() += c.count;
    }
    let hour = charts::by_queue(&control::stats(&sh.pool, HOUR).await?, chrono::Utc::now());
    let rts = control::runtimes(&sh.pool).await?;
    // Every queue with live jobs, a pause, dead jobs or activity in the hour.
    let mut names: Vec<String> = live.iter().map(|q| q.name.clone()).collect();
    names.extend(dead.keys().cloned());
    names.extend(hour.keys().cloned());
    names.sort();
    names.dedup();
    // `state` is a job state, or `available` or `scheduled` (queued jobs due
    // or not yet due).
    let jobs = |queue: &str, state: &str| {
        format!(
            "{}?queue={}&state={state}",
            ctx.url("/jobs"),
            form_urlencoded::byte_serialize(queue.as_bytes()).collect::<String>(),
        )
    };
    Ok(html! {
        (layout::flash(queues::flash(q)))
        h1 { "Overview" }
        @if names.is_empty() {
            p.empty { "No queue has jobs yet." }
        } @else {
            table.queues.overview {
                thead { tr {
                    th { "queue" } th { "status" } th.num { "available" } th.num { "scheduled" }
                    th.num { "running" } th.num { "dead" } th { "oldest wait" }
                    th { "done / min, last hour" } th { "wait p99, last hour" }
                    @if ctx.can_act() { th {} }
                } }
                tbody {
                    @for name in &names {
                        @let info = live.iter().find(|q| &q.name == name);
                        @let h = hour.get(name);
                        tr data-queue=(name) {
                            td { a href={ (ctx.url("/jobs")) "?queue=" (form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>()) } { (name) } }
                            td { @if let Some(i) = info { (queues::status(i)) } @else { span.badge.active { "active" } } }
                            td.num { a href=(jobs(name, Readiness::Available.as_str())) { (layout::count(info.map_or(0, |i| i.available))) } }
                            td.num { a href=(jobs(name, Readiness::Scheduled.as_str())) { (layout::count(info.map_or(0, |i| i.scheduled))) } }
                            td.num { a href=(jobs(name, JobState::Running.as_str())) { (layout::count(info.map_or(0, |i| i.running))) } }
                            td.num { a href=(jobs(name, JobState::Dead.as_str())) { (layout::count(dead.get(name).copied().unwrap_or(0))) } }
                            td { (info.and_then(|i| i.oldest_available_wait).map(layout::duration).unwrap_or_default()) }
                            td.chart { @if let Some(h) = h { (throughput(name, h)) } }
                            td.chart { @if let Some(h) = h { (wait(name, h)) } }
                            @if ctx.can_act() {
                                td { (queues::toggle(ctx, name, info.is_some_and(|i| i.paused.is_some()), "overview")) }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Runtimes" }
        (runtimes::table(&rts))
    })
}

fn throughput(queue: &str, h: &charts::QueueHour) -> Markup {
    let (ok, failed): (f64, f64) = (h.succeeded.iter().sum(), h.failed.iter().sum());
    let label = format!("{queue}: {ok} succeeded, {failed} failed in the last hour");
    html! {
        (charts::sparkline(&label, &[("ok", &h.succeeded), ("failed", &h.failed)]))
        span.figure { (layout::count(ok as u64)) }
    }
}

fn wait(queue: &str, h: &charts::QueueHour) -> Markup {
    let p99 = h
        .hour_p99()
        .map(layout::duration)
        .unwrap_or_else(|| "–".into());
    let mean = h
        .mean_wait()
        .map(layout::duration)
        .unwrap_or_else(|| "–".into());
    let label = format!("{queue}: wait p99 {p99}, mean {mean} over the last hour");
    html! {
        (charts::sparkline(&label, &[("wait", &h.wait_p99())]))
        span.figure title={ "mean " (mean) } { (p99) }
    }
}
