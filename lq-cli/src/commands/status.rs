//! `lq status [--watch]`: one line per queue.

use std::{collections::BTreeMap, time::Duration};

use clap::Args;
use lq_runtime::control;
use serde_json::json;
use sqlx::PgPool;

use crate::{
    filter_args::parse_duration,
    output::{human, Out},
    Failure, Outcome,
};

#[derive(Debug, Default, Args)]
pub struct StatusArgs {
    /// Redraw every this often (e.g. `2s`, at least `1s`) until Ctrl-C; with
    /// `--format json`, one compact JSON document per line each time.
    #[arg(long, value_parser = parse_watch)]
    pub watch: Option<Duration>,
}

/// Shortest `--watch`: each redraw counts every queue's jobs, so a shorter one
/// would be a busy loop against the database.
const MIN_WATCH: Duration = Duration::from_secs(1);

/// A `--watch` interval: a duration of at least [`MIN_WATCH`].
fn parse_watch(s: &str) -> Result<Duration, String> {
    let every = parse_duration(s)?;
    if every < MIN_WATCH {
        return Err(format!(
            "{s} is too often: each redraw counts every queue's jobs; watch every 1s or more"
        ));
    }
    Ok(every)
}

/// One queue's line.
#[derive(Default)]
struct Line {
    paused: Option<lq_runtime::control::Paused>,
    available: u64,
    scheduled: u64,
    running: u64,
    oldest_wait: Option<Duration>,
    rate_limit: Option<control::RateBucket>,
    succeeded_1h: u64,
    dead_1h: u64,
}

async fn lines(pool: &PgPool) -> Result<BTreeMap<String, Line>, Failure> {
    let mut lines: BTreeMap<String, Line> = BTreeMap::new();
    for q in control::queues(pool).await? {
        lines.insert(
            q.name.clone(),
            Line {
                paused: q.paused,
                available: q.available,
                scheduled: q.scheduled,
                running: q.running,
                oldest_wait: q.oldest_available_wait,
                rate_limit: q.rate_limit,
                ..Line::default()
            },
        );
    }
    // The last hour's outcomes come from the per-minute rollup the runtimes
    // write, not from the history, which no index orders by finish time.
    for m in control::stats(pool, Duration::from_secs(3600)).await? {
        let line = lines.entry(m.queue).or_default();
        line.succeeded_1h += u64::try_from(m.succeeded).unwrap_or(0);
        line.dead_1h += u64::try_from(m.dead).unwrap_or(0);
    }
    Ok(lines)
}

/// The queues' lines as JSON.
fn to_json(lines: &BTreeMap<String, Line>) -> serde_json::Value {
    json!({"queues": lines.iter().map(|(name, l)| json!({
        "queue": name, "available": l.available,
        "paused": l.paused.as_ref().map(|p| json!({"at": p.at, "by": p.by})),
        "scheduled": l.scheduled, "running": l.running,
        "oldest_wait_secs": l.oldest_wait.map(|d| d.as_secs_f64()),
        "succeeded_last_hour": l.succeeded_1h, "dead_last_hour": l.dead_1h,
        "rate_limit": l.rate_limit.as_ref().map(|r| json!({
            "allowed": r.limit.allowed(), "period_secs": r.limit.period().as_secs_f64(),
            "tokens": r.tokens, "refilled_at": r.refilled_at,
        })),
    })).collect::<Vec<_>>()})
}

/// One `--watch` redraw in JSON: one line.
fn json_line(lines: &BTreeMap<String, Line>) -> String {
    to_json(lines).to_string()
}

fn print(out: &Out, lines: &BTreeMap<String, Line>) {
    out.emit(&to_json(lines), || {
        let mut t = crate::output::table(&[
            "queue",
            "available",
            "scheduled",
            "running",
            "oldest wait",
            "succeeded 1h",
            "dead 1h",
            "rate limit",
            "paused",
        ]);
        for (name, l) in lines {
            t.add_row(vec![
                name.clone(),
                l.available.to_string(),
                l.scheduled.to_string(),
                l.running.to_string(),
                l.oldest_wait.map_or("-".to_owned(), human),
                l.succeeded_1h.to_string(),
                l.dead_1h.to_string(),
                l.rate_limit
                    .as_ref()
                    .map_or("-".to_owned(), ToString::to_string),
                l.paused.as_ref().map_or(String::new(), |p| {
                    format!("{} by {}", p.at.format("%F %T"), p.by)
                }),
            ]);
        }
        t
    });
}

pub(crate) async fn run(pool: &PgPool, out: &Out, args: StatusArgs) -> Result<Outcome, Failure> {
    let Some(every) = args.watch else {
        print(out, &lines(pool).await?);
        return Ok(Outcome::Clean);
    };
    // Listened for from the start and across the redraws: a Ctrl-C while a
    // redraw waits on the database ends the watch too (a listener made
    // afresh for each pause missed every press before it).
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let now = tokio::select! {
            now = lines(pool) => now?,
            _ = &mut ctrl_c => return Ok(Outcome::Clean),
        };
        if out.is_json() {
            // One compact document per line (NDJSON), for a script to read
            // line by line.
            outln!("{}", json_line(&now));
        } else {
            out!("\x1b[2J\x1b[H");
            print(out, &now);
        }
        if crate::output::stdout_closed() {
            return Ok(Outcome::Clean); // nobody reads the watch any more
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = &mut ctrl_c => return Ok(Outcome::Clean),
        }
    }
}
