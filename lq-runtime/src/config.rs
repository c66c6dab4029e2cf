//! Runtime settings and their defaults.

use std::time::Duration;

/// Settings of a [`crate::Runtime`]; every field has a production default.
///
/// `start()` refuses, with [`crate::Error::InvalidSetting`] naming the field,
/// settings that cannot work: a `poll_interval`, `claim_ahead_wait`,
/// `db_timeout`, `rescue_interval`, `prune_interval`, `stats_interval`,
/// `gauge_interval` or `leader_lease` under 1 ms or over a day; a
/// `leader_lease` under 500 ms; a `max_claim_batch` or
/// `max_complete_batch` of 0 or over 100,000; `claim_slots` outside 1–64;
/// `keep_finished`, `keep_dead` or `unknown_kind_grace` over 1,000 years; a
/// `pool_size` of 0; an `owner` that is empty, over 200 bytes or contains NUL.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// How often the runtime looks for work in the queues waiting for it, when no
    /// NOTIFY has woken them (default 1 s): one statement for all of them, however
    /// many queues. A missed notification costs at most this much latency.
    pub poll_interval: Duration,
    /// Most jobs one claim statement takes (default 500); a claim never takes more
    /// than the queue's idle handlers plus its claim-ahead allowance.
    pub max_claim_batch: usize,
    /// Whether a queue may claim jobs ahead of its idle handlers, so that handlers
    /// finishing while a claim is out find a job waiting (default `true`). The
    /// extra doubles while at least half the handlers sit idle after a full claim
    /// (short jobs); otherwise it is twice the handlers that finished during the
    /// last claim, so a queue of jobs much longer than a claim holds none back
    /// from other workers; at most nine times the concurrency waits, each lease
    /// renewed by the heartbeat. It makes claims of short jobs larger, and a
    /// claim's fixed cost smaller per job, keeps handlers of jobs of a few
    /// milliseconds busy, and lets a second claim go out while the first is in
    /// flight. `false` claims only for idle handlers, one claim at a time.
    pub claim_ahead: bool,
    /// Longest a job claimed ahead waits in this process for a handler (default
    /// 1 s). Past it the job goes back to the queue, its attempt unspent, and the
    /// queue stops claiming ahead until its handlers idle again: its handlers are
    /// busy with longer work, and any runtime with a free handler may take the
    /// job. Short jobs wait milliseconds.
    pub claim_ahead_wait: Duration,
    /// Most claim statements in flight at once on one queue, across every runtime
    /// sharing the database (default `Some(2)`; `None` for no bound). A claim
    /// takes one of the queue's slots (an advisory lock) for its statement; when
    /// all are taken it waits for one and claims then. Claims racing each other
    /// lock rows other claims just took and stall those jobs' completions: without
    /// the bound, 16 runtime processes on one queue drained a third as fast as
    /// one. Two let one runtime keep a claim in flight beside another; at most 64.
    /// Only a queue's first claim in flight waits: a second one takes a free
    /// slot or claims nothing, since each waiting session holds a snapshot that
    /// makes every claim walk past more dead index entries. A runtime serving
    /// more queues than it has claim connections (16) sends its first claims on
    /// borrowed connections, without the bound.
    pub claim_slots: Option<u32>,
    /// Most completions acknowledged by one statement (default 1000).
    pub max_complete_batch: usize,
    /// Bound on every database call (default 10 s). Every connection the runtime
    /// opens also sets `statement_timeout` to nine tenths of it, so the server
    /// cancels a statement held up that long before the runtime gives up on it: a
    /// claim never commits after the runtime stopped waiting for its jobs, and no
    /// abandoned statement keeps a pooled connection. Maintenance batches (rescue,
    /// prune) halve after such a cancel; the vacuum runs under six times it.
    pub db_timeout: Duration,
    /// How long `shutdown()` waits for running jobs before it stops them and hands
    /// them back to the queue (default 30 s).
    pub shutdown_grace: Duration,
    /// How often expired leases are looked for (default 5 s).
    pub rescue_interval: Duration,
    /// How often finished jobs are pruned (default 60 s).
    pub prune_interval: Duration,
    /// How long succeeded and cancelled jobs are kept (default 24 h).
    pub keep_finished: Duration,
    /// How long dead jobs are kept (default 7 days).
    pub keep_dead: Duration,
    /// Queued jobs of a kind no live runtime serving their queue can run (none
    /// links a `Perform` for it), in a queue this runtime serves, are marked dead
    /// after being ready this long (default 10 min; `None` leaves them).
    pub unknown_kind_grace: Option<Duration>,
    /// Name recorded as the lease owner (default `host:pid:random`), and this
    /// runtime's id in `lq.runtimes`. Give each runtime its own: of two live
    /// runtimes with one owner, the second warns, and neither writes the row nor
    /// leads until the first stops.
    pub owner: String,
    /// The maintenance leader's lease (default 5 s). One runtime in the cluster
    /// holds it and alone runs rescue, pruning, vacuum and the burial of unknown
    /// kinds; every runtime renews its presence in `lq.runtimes` (and the leader
    /// its lease) every fifth of it. When the leader dies, another takes over
    /// within this long; when it shuts down, at once.
    pub leader_lease: Duration,
    /// Connections of the runtime's own pool (default `None`: one per queue, at
    /// most 16, plus four; at least 2), besides its hot-path connections (one per
    /// queue, at most 16, for claims; up to two more for a busy queue's second
    /// claim in flight; one for completions) and one each for the heartbeat and
    /// the cluster beat. With more than 16 queues the claimers share their 16
    /// connections. `start()` fails with `Error::NotEnoughConnections` when the
    /// server could never give the runtime all of them;
    /// [`RuntimeBuilder::connections`](crate::RuntimeBuilder::connections) adds
    /// them up. The runtime opens its own pools with the application
    /// pool's connect options, so a starved application pool cannot stall claims,
    /// completions or leases, and it skips the per-acquire ping, which would
    /// double every round trip.
    pub pool_size: Option<u32>,
    /// How often this runtime adds its counts to the per-minute rollup
    /// `lq.stats_minute` (default 10 s; see `control::stats`). The rollup keeps
    /// as long as `keep_finished`.
    pub stats_interval: Duration,
    /// How often the leader sets the cluster-wide gauges (queue depth, oldest
    /// wait, p99 wait) under the `metrics` feature (default 15 s). Their query
    /// counts every live job; after a slow one the next waits at least twenty
    /// times as long, so a large backlog makes the gauges older, not the server busier.
    pub gauge_interval: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(1),
            max_claim_batch: 500,
            claim_ahead: true,
            claim_ahead_wait: Duration::from_secs(1),
            claim_slots: Some(2),
            max_complete_batch: 1000,
            db_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(30),
            rescue_interval: Duration::from_secs(5),
            prune_interval: Duration::from_secs(60),
            keep_finished: Duration::from_secs(24 * 3600),
            keep_dead: Duration::from_secs(7 * 24 * 3600),
            unknown_kind_grace: Some(Duration::from_secs(600)),
            owner: default_owner(),
            leader_lease: Duration::from_secs(5),
            pool_size: None,
            stats_interval: Duration::from_secs(10),
            gauge_interval: Duration::from_secs(15),
        }
    }
}

fn default_owner() -> String {
    format!(
        "{}:{}:{:04x}",
        host_name(),
        std::process::id(),
        fastrand::u16(..)
    )
}

/// This machine's name (`$HOSTNAME`, else `/etc/hostname`, else `host`).
pub(crate) fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned())
}
