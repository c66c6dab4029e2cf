//! The harness's side of one measured drain: a pool of its own (tagged, its
//! statements counted and its sessions closed before commits are read, so the
//! commits per job leave them out exactly) that samples what the bench
//! database's sessions wait on and tells when the queue is empty.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Result;
use serde_json::{json, Value};
use sqlx::{postgres::PgConnectOptions, PgPool};
use tokio::task::JoinHandle;

use crate::db;

/// Application name of the watch's sessions.
const WATCH_APP: &str = "lq-bench-watch";
/// How often sessions are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Per sampled session of the bench database (runtimes' sessions and server
/// workers such as autovacuum; not the harness's): what it waits on. Idle
/// sessions count as `idle`, active ones without a wait event as `no wait
/// (CPU)`; `vacuuming` counts sessions running a vacuum, whatever they wait on.
const SAMPLE_SQL: &str = "
    select case when state = 'idle' then 'idle'
                when wait_event is null then 'no wait (CPU)'
                else wait_event_type || '/' || wait_event end, count(*)
    from pg_stat_activity
    where datname = current_database() and pid <> pg_backend_pid()
      and (application_name = $1 or backend_type <> 'client backend')
    group by 1
    union all
    select 'vacuuming', count(*) from pg_stat_activity
    where datname = current_database() and state = 'active'
      and (backend_type = 'autovacuum worker' or query ilike 'vacuum%')";

/// Client sessions on the whole server, and the most it allows: a point whose
/// runtimes need more connections than the server has waits for them (sqlx
/// retries a refused connect), which bends a curve for a reason of its own.
const CLIENTS_SQL: &str = "
    select count(*) filter (where backend_type = 'client backend'),
           current_setting('max_connections')::int8
    from pg_stat_activity";

/// A running watch; [`Watch::close`] ends it.
pub struct Watch {
    pool: PgPool,
    statements: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    sampler: JoinHandle<Tally>,
}

/// Sessions seen per label, summed over the samples.
#[derive(Default)]
struct Tally {
    samples: u64,
    seen: HashMap<String, i64>,
    /// The most client sessions one sample saw, and `max_connections`.
    peak_clients: i64,
    max_connections: i64,
}

impl Watch {
    /// Opens the watch's pool and starts sampling.
    pub async fn open(opts: &PgConnectOptions) -> Result<Watch> {
        let pool = db::pool(&opts.clone().application_name(WATCH_APP), 2).await?;
        let statements = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = tokio::spawn(sample(pool.clone(), statements.clone(), stop.clone()));
        Ok(Watch {
            pool,
            statements,
            stop,
            sampler,
        })
    }

    /// Whether `lq.jobs` is empty: every job of the drain finished (succeeded
    /// jobs move to `lq.finished_jobs` in the transaction that ends them).
    pub async fn drained(&self) -> Result<bool> {
        self.statements.fetch_add(1, Relaxed);
        Ok(
            sqlx::query_scalar("select not exists (select 1 from lq.jobs)")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Stops sampling and closes the pool; returns the waits seen and how many
    /// transactions the watch committed.
    pub async fn close(self) -> Result<(Waits, u64)> {
        self.stop.store(true, Relaxed);
        let tally = self.sampler.await?;
        self.pool.close().await;
        Ok((Waits::of(tally), self.statements.load(Relaxed)))
    }
}

/// Samples every [`SAMPLE_EVERY`] until `stop`.
async fn sample(pool: PgPool, statements: Arc<AtomicU64>, stop: Arc<AtomicBool>) -> Tally {
    let mut tally = Tally::default();
    let mut next = tokio::time::Instant::now();
    while !stop.load(Relaxed) {
        statements.fetch_add(1, Relaxed);
        let rows: Result<Vec<(String, i64)>, _> = sqlx::query_as(SAMPLE_SQL)
            .bind(db::RUNTIME_APP)
            .fetch_all(&pool)
            .await;
        if let Ok(rows) = rows {
            tally.samples += 1;
            for (what, n) in rows {
                *tally.seen.entry(what).or_default() += n;
            }
        }
        statements.fetch_add(1, Relaxed);
        let clients = clients(&pool).await;
        if let Ok((n, limit)) = clients {
            tally.peak_clients = tally.peak_clients.max(n);
            tally.max_connections = limit;
        }
        // Every 100 ms on the clock; a late sample is followed at once.
        next = (next + SAMPLE_EVERY).max(tokio::time::Instant::now());
        tokio::time::sleep_until(next).await;
    }
    tally
}

/// Client sessions on the whole server now, and `max_connections`.
pub async fn clients(pool: &PgPool) -> Result<(i64, i64)> {
    Ok(sqlx::query_as(CLIENTS_SQL).fetch_one(pool).await?)
}

/// Mean sessions per label over a drain's samples, most first.
#[derive(Debug, Clone, Default)]
pub struct Waits {
    pub samples: u64,
    pub means: Vec<(String, f64)>,
    /// The most client sessions on the server in one sample (every database,
    /// the harness's included), and the server's `max_connections`.
    pub peak_clients: i64,
    pub max_connections: i64,
}

impl Waits {
    fn of(t: Tally) -> Waits {
        let n = t.samples.max(1) as f64;
        let mut means: Vec<(String, f64)> = t
            .seen
            .into_iter()
            .map(|(what, sum)| (what, sum as f64 / n))
            .collect();
        means.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Waits {
            samples: t.samples,
            means,
            peak_clients: t.peak_clients,
            max_connections: t.max_connections,
        }
    }

    /// Mean sessions with `label` (0 when never seen).
    pub fn mean(&self, label: &str) -> f64 {
        self.means
            .iter()
            .find(|(w, _)| w == label)
            .map_or(0.0, |m| m.1)
    }

    /// The `k` commonest real waits (not idle, CPU or the vacuum count).
    pub fn top(&self, k: usize) -> Vec<(String, f64)> {
        self.means
            .iter()
            .filter(|(w, _)| w.contains('/') && w != "no wait (CPU)")
            .take(k)
            .cloned()
            .collect()
    }

    /// `waits: Lock/transactionid 1.20, IO/WALSync 0.31; CPU 1.9` (mean sessions).
    pub fn show(&self, k: usize) -> String {
        let top = self.top(k);
        let waits = if top.is_empty() {
            "none sampled".to_owned()
        } else {
            top.iter()
                .map(|(w, m)| format!("{w} {m:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "waits (mean sessions): {waits}; on CPU {:.2}",
            self.mean("no wait (CPU)")
        )
    }

    pub fn json(&self) -> Value {
        let means: serde_json::Map<String, Value> = self
            .means
            .iter()
            .map(|(w, m)| (w.clone(), json!(m)))
            .collect();
        json!({ "samples": self.samples, "mean_sessions": means,
                "peak_client_sessions": self.peak_clients,
                "max_connections": self.max_connections })
    }
}

/// Waits (at most 10 s, then says so) until no runtime or watch session is left
/// on the bench database: a backend flushes its statistics when it exits, so
/// commits read after this include all of theirs.
pub async fn quiet(pool: &PgPool) -> Result<()> {
    let t0 = Instant::now();
    loop {
        let left: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity
             where datname = current_database() and application_name in ($1, $2)",
        )
        .bind(db::RUNTIME_APP)
        .bind(WATCH_APP)
        .fetch_one(pool)
        .await?;
        if left == 0 {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(10) {
            println!("    ({left} runtime or watch sessions still open 10 s after their pools closed: commits may be undercounted)");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
