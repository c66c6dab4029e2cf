//! `lq jobs list|count|show|retry|cancel|delete|run-now`.

use clap::{Args, Subcommand};
use lq_runtime::{
    control::{self, BulkReport, JobRow},
    AttemptError, JobFilter, JobState,
};
use serde::Serialize;
use serde_json::{json, value::RawValue};
use sqlx::PgPool;

use super::bulk_verb::Verb;
use crate::{
    filter_args::FilterArgs,
    output::{cut, printable, to_json, Out},
    prompt::confirm,
    Failure, Outcome,
};

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Jobs matching a filter, newest first.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// Most jobs shown.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Only ids below this (the next page after one ending at it).
        #[arg(long)]
        before: Option<i64>,
    },
    /// How many jobs match a filter, per queue and state (counted in the
    /// database; counting finished states reads the history the filter allows,
    /// so a long one may need --timeout).
    Count {
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// One job: every field, its payload and each failed attempt's error.
    Show {
        /// The job's id.
        id: i64,
    },
    /// Run dead or cancelled jobs again now, with fresh attempts.
    Retry(BulkArgs),
    /// Cancel queued or running jobs.
    Cancel(BulkArgs),
    /// Delete queued or finished jobs for good.
    Delete(BulkArgs),
    /// Make queued jobs due now (scheduled, snoozed or backing off).
    ///
    /// They run as soon as a worker is free, their attempts and errors
    /// unchanged. A filter without --state takes queued jobs only.
    RunNow(BulkArgs),
}

/// Which jobs a bulk action takes: ids, or a filter, or `--all`.
#[derive(Debug, Args)]
pub struct BulkArgs {
    /// These jobs (instead of a filter). An id that names no job is reported
    /// ("no job ID") and makes lq exit 2, as `jobs show` does; the others are
    /// still acted on.
    ids: Vec<i64>,
    #[command(flatten)]
    filter: FilterArgs,
    /// Every job (required when no id or filter is given).
    #[arg(long)]
    all: bool,
    /// Act on at most this many (newest first).
    #[arg(long)]
    limit: Option<u64>,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    yes: bool,
    /// Show how many jobs match, and change nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) async fn run(
    pool: &PgPool,
    out: &Out,
    command: JobsCommand,
) -> Result<Outcome, Failure> {
    match command {
        JobsCommand::List {
            filter,
            limit,
            before,
        } => {
            let mut f = filter.to_filter();
            f.before_id = before;
            let rows = control::list(pool, &f, limit).await?;
            out.emit(
                &JobsJson {
                    jobs: rows.iter().map(RowJson::of).collect(),
                },
                || {
                    let mut t = crate::output::table(&[
                        "id",
                        "kind",
                        "queue",
                        "state",
                        "attempts",
                        "when",
                        "last error",
                    ]);
                    for r in &rows {
                        let when = r
                            .finished_at
                            .or(r
                                .started_at
                                .filter(|_| r.state.is_live() && r.lease_owner.is_some()))
                            .unwrap_or(r.run_at);
                        t.add_row(vec![
                            r.id.to_string(),
                            r.kind.clone(),
                            r.queue.clone(),
                            r.state.to_string(),
                            format!("{}/{}", r.attempts, r.max_attempts),
                            when.format("%F %T").to_string(),
                            r.errors.last().map_or(String::new(), |e| cut(&e.error, 60)),
                        ]);
                    }
                    t
                },
            );
            if !out.is_json() && rows.len() as i64 == limit {
                if let Some(last) = rows.last() {
                    outln!("(more: --before {})", last.id);
                }
            }
            Ok(Outcome::Clean)
        }
        JobsCommand::Count { filter } => {
            let counts = control::count(pool, &filter.to_filter()).await?;
            let total = counts.iter().map(|c| c.count).sum::<u64>();
            out.emit(
                &json!({
                    "counts": counts.iter().map(|c| json!({
                        "queue": c.queue,
                        "state": c.state.to_string(),
                        "count": c.count,
                    })).collect::<Vec<_>>(),
                    "total": total,
                }),
                || {
                    let mut t = crate::output::table(&["queue", "state", "jobs"]);
                    for c in &counts {
                        t.add_row(vec![
                            c.queue.clone(),
                            c.state.to_string(),
                            c.count.to_string(),
                        ]);
                    }
                    t.add_row(vec!["total".to_owned(), String::new(), total.to_string()]);
                    t
                },
            );
            Ok(Outcome::Clean)
        }
        JobsCommand::Show { id } => {
            let r = control::get(pool, id).await?;
            if out.is_json() {
                outln!("{}", to_json(&RowJson::of(&r)));
                return Ok(Outcome::Clean);
            }
            let opt = |t: Option<lq_runtime::chrono::DateTime<lq_runtime::chrono::Utc>>| {
                t.map_or("-".to_owned(), |t| t.to_rfc3339())
            };
            for (k, v) in [
                ("id", r.id.to_string()),
                ("kind", r.kind.clone()),
                ("queue", r.queue.clone()),
                ("state", r.state.to_string()),
                ("priority", r.priority.to_string()),
                ("attempts", format!("{} of {}", r.attempts, r.max_attempts)),
                (
                    "unique key",
                    r.unique_key.clone().unwrap_or_else(|| "-".into()),
                ),
                ("created", r.created_at.to_rfc3339()),
                ("run at", r.run_at.to_rfc3339()),
                ("started", opt(r.started_at)),
                ("finished", opt(r.finished_at)),
                (
                    "worker",
                    r.lease_owner.clone().unwrap_or_else(|| "-".into()),
                ),
                ("cancel requested", opt(r.cancel_requested_at)),
            ] {
                outln!("{k:>16}  {}", printable(&v));
            }
            outln!("{:>16}  {}", "payload", printable(&pretty(r.payload.get())));
            if let Some(meta) = &r.meta {
                outln!("{:>16}  {}", "meta", printable(&pretty(meta.get())));
            }
            for e in &r.errors {
                outln!(
                    "{:>16}  {} on {}: {}",
                    format!("attempt {}", e.attempt),
                    e.at.to_rfc3339(),
                    printable(e.worker.as_deref().unwrap_or("-")),
                    printable(&e.error)
                );
            }
            Ok(Outcome::Clean)
        }
        JobsCommand::Retry(a) => bulk(pool, out, a, Verb::Retry).await,
        JobsCommand::Cancel(a) => bulk(pool, out, a, Verb::Cancel).await,
        JobsCommand::Delete(a) => bulk(pool, out, a, Verb::Delete).await,
        JobsCommand::RunNow(a) => bulk(pool, out, a, Verb::RunNow).await,
    }
}

/// Indented JSON when it decodes (any depth is printed raw otherwise).
fn pretty(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .map(|v| format!("{v:#}").replace('\n', &format!("\n{:>18}", "")))
        .unwrap_or_else(|_| text.to_owned())
}

/// `jobs list` in JSON.
#[derive(Serialize)]
struct JobsJson<'a> {
    jobs: Vec<RowJson<'a>>,
}

/// A job in JSON. The payload and metadata are written through as the raw text
/// stored: a `serde_json::Value` would decode them again, and fail past 128
/// levels of nesting, which PostgreSQL and `lq` otherwise take.
#[derive(Serialize)]
struct RowJson<'a> {
    id: i64,
    kind: &'a str,
    queue: &'a str,
    state: JobState,
    priority: i16,
    attempts: i32,
    max_attempts: i32,
    unique_key: Option<&'a str>,
    run_at: Time,
    created_at: Time,
    started_at: Option<Time>,
    finished_at: Option<Time>,
    lease_owner: Option<&'a str>,
    cancel_requested_at: Option<Time>,
    payload: &'a RawValue,
    meta: Option<&'a RawValue>,
    errors: &'a [AttemptError],
}

type Time = lq_runtime::chrono::DateTime<lq_runtime::chrono::Utc>;

impl<'a> RowJson<'a> {
    fn of(r: &'a JobRow) -> Self {
        Self {
            id: r.id,
            kind: &r.kind,
            queue: &r.queue,
            state: r.state,
            priority: r.priority,
            attempts: r.attempts,
            max_attempts: r.max_attempts,
            unique_key: r.unique_key.as_deref(),
            run_at: r.run_at,
            created_at: r.created_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            lease_owner: r.lease_owner.as_deref(),
            cancel_requested_at: r.cancel_requested_at,
            payload: &r.payload,
            meta: r.meta.as_deref(),
            errors: &r.errors,
        }
    }
}

impl JobsCommand {
    /// The arguments' own mistakes, found without the database.
    pub(crate) fn check(&self) -> Result<(), String> {
        let (a, verb) = match self {
            JobsCommand::List { filter, limit, .. } => {
                if *limit < 0 {
                    return Err(format!("limit {limit} is negative"));
                }
                return filter.to_filter().validate().map_err(|e| e.to_string());
            }
            JobsCommand::Count { filter } => {
                return filter.to_filter().validate().map_err(|e| e.to_string())
            }
            JobsCommand::Show { .. } => return Ok(()),
            JobsCommand::Retry(a) => (a, Verb::Retry),
            JobsCommand::Cancel(a) => (a, Verb::Cancel),
            JobsCommand::Delete(a) => (a, Verb::Delete),
            JobsCommand::RunNow(a) => (a, Verb::RunNow),
        };
        a.check(verb)
    }
}

impl BulkArgs {
    /// Ids or a filter (or `--all`), and a filter the database would take.
    fn check(&self, verb: Verb) -> Result<(), String> {
        if !self.ids.is_empty() && !self.filter.is_empty() {
            return Err("give job ids or filter flags, not both".into());
        }
        if self.ids.is_empty() && self.filter.is_empty() && !self.all {
            return Err(format!(
                "{} which jobs? give ids, filter flags (see --help), or --all",
                verb.name()
            ));
        }
        self.filter
            .to_filter()
            .validate()
            .map_err(|e| e.to_string())
    }
}

async fn bulk(pool: &PgPool, out: &Out, a: BulkArgs, verb: Verb) -> Result<Outcome, Failure> {
    a.check(verb)?;
    let name = verb.name();
    // Each filter with the id it was made from, if the user named ids.
    let mut filter = a.filter.to_filter();
    if verb == Verb::RunNow && filter.states.is_empty() {
        // Only queued jobs can be made due: `--kind K` means K's queued jobs,
        // not its whole history refused one by one. Named ids are each
        // looked at, and refused with their state.
        filter.states.push(JobState::Queued);
    }
    let filters: Vec<(Option<i64>, JobFilter)> = if a.ids.is_empty() {
        // None matching now: none is counted or acted on, not even one
        // enqueued in the meantime.
        pinned_to_newest(pool, filter)
            .await?
            .map(|f| (None, f))
            .into_iter()
            .collect()
    } else {
        a.ids
            .iter()
            .map(|id| (Some(*id), JobFilter::new().id_range(*id, *id)))
            .collect()
    };
    let mut matched = 0u64;
    let mut missing = Vec::new();
    for (id, f) in &filters {
        let n = control::count(pool, f)
            .await?
            .iter()
            .map(|c| c.count)
            .sum::<u64>();
        if n == 0 {
            missing.extend(*id);
        }
        matched += n;
    }
    // Named before any prompt, so the user confirms knowing what is not there.
    for id in &missing {
        eprintln!("lq: no job {id}");
    }
    let clean = if missing.is_empty() {
        Outcome::Clean
    } else {
        Outcome::NotFound
    };
    let matched = a.limit.map_or(matched, |l| matched.min(l));
    if a.dry_run {
        out.emit(
            &json!({"action": name, "matched": matched, "dry_run": true, "missing": missing}),
            || {
                let mut t = crate::output::table(&["action", "jobs matching"]);
                t.add_row(vec![name.to_owned(), matched.to_string()]);
                t
            },
        );
        return Ok(clean);
    }
    if matched == 0 {
        out.emit(
            &json!({"action": name, "matched": 0, "done": [], "refused": [], "missing": missing}),
            || {
                let mut t = crate::output::table(&["action", "jobs matching"]);
                t.add_row(vec![name.to_owned(), "0".to_owned()]);
                t
            },
        );
        return Ok(clean);
    }
    if !a.yes && !confirm(&format!("{name} {matched} jobs?"))? {
        return Err("not confirmed; nothing changed".into());
    }
    // At most the number counted (and confirmed): jobs that came to match since
    // are left alone, as on the dashboard.
    let mut total = BulkReport::default();
    let mut stopped = None;
    for (_, f) in &filters {
        let left = matched.saturating_sub(total.matched);
        if left == 0 {
            break;
        }
        let left = Some(left);
        let r = match verb.apply(pool, f, left).await {
            Ok(r) => r,
            // What the committed batches did is printed before the error, so a
            // failure partway never hides jobs that were changed.
            Err(lq_runtime::CoreError::BulkStopped { report, source, .. }) => {
                stopped = Some(source);
                *report
            }
            Err(e) if total.matched == 0 => return Err(e.into()),
            Err(e) => {
                stopped = Some(Box::new(e));
                BulkReport::default()
            }
        };
        total.matched += r.matched;
        total.done.extend(r.done);
        total.refused.extend(r.refused);
        if stopped.is_some() {
            break;
        }
    }
    out.emit(
        &json!({
            "action": name,
            "matched": total.matched,
            "done": total.done,
            "refused": total.refused.iter().map(|(id, e)| json!({"id": id, "reason": e.to_string()})).collect::<Vec<_>>(),
            "missing": missing,
            "stopped": stopped.as_ref().map(|e| lq_runtime::chain(e.as_ref())),
        }),
        || {
            let mut t = crate::output::table(&["action", "matched", "done", "refused"]);
            t.add_row(vec![name.to_owned(), total.matched.to_string(), total.done.len().to_string(), total.refused.len().to_string()]);
            for (id, e) in &total.refused {
                t.add_row(vec![String::new(), id.to_string(), String::new(), e.to_string()]);
            }
            t
        },
    );
    if let Some(source) = stopped {
        // The same typed error the library gives, counting every filter's jobs.
        let action = verb.done();
        let report = Box::new(total);
        return Err(Box::new(lq_runtime::CoreError::BulkStopped {
            action,
            report,
            source,
        }));
    }
    // A missing id (exit 2) outweighs a refused job (exit 1).
    Ok(if clean == Outcome::Clean && !total.refused.is_empty() {
        Outcome::Findings
    } else {
        clean
    })
}

/// `filter` narrowed to the jobs it matches now: ids up to the newest match, so
/// a job enqueued after the count (and the confirmation) is never acted on.
/// `None` when nothing matches now.
async fn pinned_to_newest(
    pool: &PgPool,
    mut filter: JobFilter,
) -> Result<Option<JobFilter>, Failure> {
    let Some(newest) = control::list(pool, &filter, 1).await?.into_iter().next() else {
        return Ok(None);
    };
    filter.max_id = Some(filter.max_id.map_or(newest.id, |m| m.min(newest.id)));
    Ok(Some(filter))
}
