//! Classifies every job of a scenario: lost, duplicated (and whether each
//! duplicate is justified by an expired lease), unexpected, and finds jobs left
//! running under an expired lease.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::Result;
use sqlx::PgPool;

/// How an acknowledged job must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// `succeeded`.
    Succeed,
    /// `dead`, its last error containing one of the texts.
    Dead(&'static [&'static str]),
}

/// What the orchestrator knows it enqueued.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Every acknowledged enqueue (id returned and, for a transaction, committed).
    pub expect: BTreeMap<i64, Expect>,
    /// `seq` of enqueues whose outcome is unknown (the commit's reply was lost).
    pub in_doubt: Vec<u64>,
}

impl Ledger {
    /// Records an acknowledged enqueue.
    pub fn ack(&mut self, id: i64, expect: Expect) {
        self.expect.insert(id, expect);
    }
}

/// The classification of one scenario's jobs.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Jobs accounted for (acknowledged, plus in-doubt enqueues that committed).
    pub jobs: usize,
    /// Acknowledged but missing, or not ended as expected for a succeeding job.
    pub lost: usize,
    /// Jobs performed to completion more than once.
    pub duplicated: usize,
    /// Duplicates whose earlier completed attempt's lease never expired.
    pub unjustified: usize,
    /// Jobs performed but never enqueued.
    pub unexpected: usize,
    /// Jobs still `running` with an expired lease.
    pub expired_running: i64,
    /// In-doubt enqueues found committed (then held to the same standard).
    pub in_doubt_committed: usize,
    /// Why, for each count above, with example ids.
    pub problems: Vec<String>,
}

struct JobRow {
    state: String,
    errors: Vec<(i64, String)>,
}

/// Classifies every job in the scenario's database against `ledger`.
pub async fn classify(pool: &PgPool, ledger: &Ledger) -> Result<Verdict> {
    let mut v = Verdict::default();
    let mut expect = ledger.expect.clone();
    let seqs: Vec<String> = ledger.in_doubt.iter().map(u64::to_string).collect();
    let committed: Vec<i64> =
        sqlx::query_scalar("select id from lq.all_jobs where payload->>'seq' = any($1)")
            .bind(&seqs)
            .fetch_all(pool)
            .await?;
    for id in committed {
        if expect.insert(id, Expect::Succeed).is_none() {
            v.in_doubt_committed += 1;
        }
    }
    v.jobs = expect.len();

    let rows: Vec<(i64, String, serde_json::Value)> =
        sqlx::query_as("select id, state::text, errors from lq.all_jobs")
            .fetch_all(pool)
            .await?;
    let jobs: HashMap<i64, JobRow> = rows
        .into_iter()
        .map(|(id, state, errors)| {
            let errors = errors
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|e| {
                            let attempt = e["attempt"].as_i64().unwrap_or(-1);
                            (attempt, e["error"].as_str().unwrap_or_default().to_owned())
                        })
                        .collect()
                })
                .unwrap_or_default();
            (id, JobRow { state, errors })
        })
        .collect();

    let mut lost = Vec::new();
    let mut wrong = Vec::new();
    for (id, exp) in &expect {
        match (exp, jobs.get(id)) {
            (_, None) => lost.push(format!("{id} (row missing)")),
            (Expect::Succeed, Some(j)) if j.state != "succeeded" => {
                lost.push(format!("{id} ({})", j.state))
            }
            (Expect::Dead(reasons), Some(j)) => {
                let last = j.errors.last().map(|e| e.1.as_str()).unwrap_or_default();
                if j.state != "dead" || !reasons.iter().any(|r| last.contains(r)) {
                    wrong.push(format!(
                        "{id} ended {} with last error {last:?}, expected dead with one of {reasons:?}",
                        j.state
                    ));
                }
            }
            _ => {}
        }
    }
    v.lost = lost.len();
    note(&mut v.problems, "lost", &lost);
    note(&mut v.problems, "wrong end state", &wrong);

    // Completed performances per job, in order of completion.
    let perf: Vec<(i64, i32, String, Option<f64>)> = sqlx::query_as(
        "select job_id, attempt, worker, extract(epoch from finished_at)::float8 from fault.performed
         order by job_id, finished_at nulls first",
    )
    .fetch_all(pool)
    .await?;
    let mut done: BTreeMap<i64, Vec<(i32, String)>> = BTreeMap::new();
    let mut unexpected = HashSet::new();
    for (job, attempt, worker, finished) in perf {
        if !expect.contains_key(&job) {
            unexpected.insert(job);
        }
        if finished.is_some() {
            done.entry(job).or_default().push((attempt, worker));
        }
    }
    v.unexpected = unexpected.len();
    let mut ids: Vec<_> = unexpected.into_iter().collect();
    ids.sort_unstable();
    note(
        &mut v.problems,
        "unexpected",
        &ids.iter().map(i64::to_string).collect::<Vec<_>>(),
    );

    let mut unjustified = Vec::new();
    for (job, runs) in done.iter_mut().filter(|(_, r)| r.len() > 1) {
        v.duplicated += 1;
        // The run the database accepted is the newest attempt; every earlier
        // attempt that also completed must have lost its lease. Order by attempt,
        // not by finish time: a stale handler can finish after its successor.
        runs.sort_by_key(|(attempt, _)| *attempt);
        let errors = jobs
            .get(job)
            .map(|j| j.errors.as_slice())
            .unwrap_or_default();
        for (attempt, worker) in &runs[..runs.len() - 1] {
            let expired = errors
                .iter()
                .any(|(a, e)| a == &i64::from(*attempt) && e.starts_with("lease expired"));
            if !expired {
                unjustified.push(format!(
                    "{job} (attempt {attempt} by {worker} completed, its lease never expired)"
                ));
                break;
            }
        }
    }
    v.unjustified = unjustified.len();
    note(&mut v.problems, "unjustified duplicate", &unjustified);

    v.expired_running = sqlx::query_scalar(
        "select count(*) from lq.all_jobs where state = 'running' and lease_expires_at < now()",
    )
    .fetch_one(pool)
    .await?;
    if v.expired_running > 0 {
        v.problems.push(format!(
            "{} jobs left running with an expired lease",
            v.expired_running
        ));
    }
    Ok(v)
}

fn note(problems: &mut Vec<String>, what: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let shown: Vec<&str> = items.iter().take(5).map(String::as_str).collect();
    let more = if items.len() > 5 {
        format!(" and {} more", items.len() - 5)
    } else {
        String::new()
    };
    problems.push(format!(
        "{} {what}: {}{more}",
        items.len(),
        shown.join(", ")
    ));
}
