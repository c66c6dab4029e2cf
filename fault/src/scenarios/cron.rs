//! Scenario 7: one 1-second cron schedule shared by three runtimes, under faults.
//!
//! Three workers serve the `cron` queue, so each runs a scheduler for
//! `fault.cron` (`* * * * * *`). For 30 s of database time from the first tick,
//! one worker is killed (`kill -9`) and restarted twice and another is frozen
//! (`SIGSTOP`) for 3–4 s and resumed. Each fault is triggered by the number of
//! tick rows, then aimed at a tick boundary (by database time): a kill a few
//! milliseconds after it, when the schedulers wake; the freeze at the worker
//! caught holding the schedule's row lock mid-transaction (its backend found in
//! `pg_stat_activity`, its process by the connection's port), so the server's 2 s
//! `idle_in_transaction_session_timeout` must free the schedule.
//!
//! Then, by database time, for every whole second from the first tick to the last
//! full second before shutdown: the jobs whose `lq.cron_ticks` row is that second.
//! Pass: exactly one job per tick (a runtime was always alive, so none may be
//! missed), none created before its tick, no catch-up row, no job without a tick.
//! Every tick's job must also succeed, under the suite's usual classification.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use super::Stage;
use crate::{
    classify::Expect,
    jobs::CRON_KIND,
    probe::{self, Deadline},
    workers::{Fleet, WorkerSpec},
};

/// Length of the observed window, in seconds of database time.
const WINDOW_SECS: f64 = 30.0;

/// One fault, fired once this many tick rows exist.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Kill { after_ticks: i64 },
    Freeze { after_ticks: i64, ms: u32 },
}

impl Fault {
    fn after_ticks(self) -> i64 {
        match self {
            Fault::Kill { after_ticks } | Fault::Freeze { after_ticks, .. } => after_ticks,
        }
    }
}

pub(super) async fn run(st: &mut Stage<'_>) -> Result<Fleet> {
    let spec = WorkerSpec {
        cron_slots: 4,
        ..st.worker_spec(2)
    };
    let mut fleet = Fleet::new(st.name, spec);
    fleet.start(3)?;
    let killed = st.rng.usize(..3);
    let frozen = (killed + 1 + st.rng.usize(..2)) % 3;
    let faults = [
        Fault::Kill {
            after_ticks: st.rng.i64(4..=7),
        },
        Fault::Freeze {
            after_ticks: st.rng.i64(10..=13),
            ms: st.rng.u32(3000..=4000),
        },
        Fault::Kill {
            after_ticks: st.rng.i64(19..=23),
        },
    ];
    st.info(format!(
        "3 workers scheduling {CRON_KIND} every second; w{killed} is killed twice, another frozen once \
         (the one caught holding the schedule's lock, else w{frozen}): {faults:?}"
    ));

    let d = Deadline::new("the first cron tick", Duration::from_secs(20));
    let first_tick = loop {
        supervise(st, &mut fleet)?;
        let first: Option<f64> = sqlx::query_scalar(
            "select extract(epoch from min(tick))::float8 from lq.cron_ticks where kind = $1",
        )
        .bind(CRON_KIND)
        .fetch_one(&st.pool)
        .await?;
        if let Some(t) = first {
            break t;
        }
        d.tick().await?;
    };
    st.info(format!("first tick at {first_tick:.3}"));

    for fault in faults {
        let n = fault.after_ticks();
        let d = Deadline::new(format!("{n} tick rows"), Duration::from_secs(40));
        while tick_rows(st).await? < n {
            supervise(st, &mut fleet)?;
            d.tick().await?;
        }
        match fault {
            Fault::Kill { .. } => {
                // Aim at the schedulers' wake-up: a few ms after the next tick boundary.
                let offset = f64::from(st.rng.u32(0..=25)) / 1000.0;
                let now = probe::db_now(&st.pool).await?;
                let aim = now.floor() + 1.0 + offset;
                tokio::time::sleep(Duration::from_secs_f64(aim - now)).await;
                let at = probe::db_now(&st.pool).await?;
                let owner = fleet.kill9_and_restart(killed).await?;
                st.info(format!(
                    "kill -9 {owner} after {n} ticks, {:.0} ms past a tick boundary; restarted",
                    (at - at.floor()) * 1000.0
                ));
            }
            Fault::Freeze { ms, .. } => {
                // Preferably the worker caught holding the schedule's lock.
                let (caught, misses) = catch_holder(st, &fleet, killed).await?;
                let (victim, how, at) = match caught {
                    Some((i, since)) => (
                        i,
                        "caught holding the schedule's lock mid-transaction",
                        since,
                    ),
                    None => {
                        let w = fleet.get(frozen).context("frozen worker")?;
                        w.signal("STOP")?;
                        (
                            frozen,
                            "no lock holder caught",
                            probe::db_now(&st.pool).await?,
                        )
                    }
                };
                if misses > 0 {
                    st.info(format!(
                        "{misses} near miss(es): a holder frozen too late, resumed within ~60 ms"
                    ));
                }
                let owner = fleet.get(victim).context("frozen worker")?.owner.clone();
                st.info(format!(
                    "SIGSTOP {owner} ({how}) after {n}+ ticks, {:.0} ms past a tick boundary, for {ms} ms",
                    (at - at.floor()) * 1000.0
                ));
                tokio::time::sleep(Duration::from_millis(400)).await;
                let stuck = stuck_transactions(st).await?;
                if stuck > 0 {
                    st.info(format!(
                        "{stuck} worker transaction(s) left idle in transaction by the freeze (the server ends them after 2 s)"
                    ));
                }
                let d = Deadline::new("the freeze to last", Duration::from_secs(10));
                while probe::db_now(&st.pool).await? < at + f64::from(ms) / 1000.0 {
                    supervise(st, &mut fleet)?;
                    d.tick().await?;
                }
                fleet.get(victim).context("frozen worker")?.signal("CONT")?;
                st.info(format!("SIGCONT {owner}"));
            }
        }
    }

    // The window: whole seconds from the first tick to the last full second before
    // shutdown, at least WINDOW_SECS long.
    let d = Deadline::new("the end of the window", Duration::from_secs(45));
    while probe::db_now(&st.pool).await? < first_tick + WINDOW_SECS + 1.0 {
        supervise(st, &mut fleet)?;
        d.tick().await?;
    }
    let last_tick = probe::db_now(&st.pool).await?.floor() - 1.0;
    // Every job of the window's ticks done before shutdown (jobs of a killed or
    // frozen worker come back when their 2 s lease expires).
    let d = Deadline::new(
        "every job of the window's ticks to finish",
        Duration::from_secs(20),
    );
    loop {
        supervise(st, &mut fleet)?;
        let live: i64 = sqlx::query_scalar(
            "select count(*) from lq.all_jobs where kind = $1 and state in ('queued', 'running')
               and id in (select job_id from lq.cron_ticks where kind = $1 and tick <= to_timestamp($2))",
        )
        .bind(CRON_KIND)
        .bind(last_tick)
        .fetch_one(&st.pool)
        .await?;
        if live == 0 {
            break;
        }
        if d.tick().await.is_err() {
            st.fail(format!("{live} jobs of the window's ticks never finished"));
            break;
        }
    }
    let stop_at = probe::db_now(&st.pool).await?;
    for bad in fleet.stop_all(Duration::from_secs(15)).await {
        st.fail(format!("graceful stop: {bad}"));
    }
    st.info(format!(
        "window {first_tick:.0}..={last_tick:.0} ({} s), shutdown at {stop_at:.3}",
        last_tick - first_tick + 1.0
    ));

    analyse(st, first_tick, last_tick).await?;
    Ok(fleet)
}

/// Restarts a worker that exited on its own, counting it as a failure.
fn supervise(st: &mut Stage<'_>, fleet: &mut Fleet) -> Result<()> {
    for e in fleet.supervise()? {
        st.fail(format!(
            "worker {} exited on its own: {}",
            e.owner, e.status
        ));
    }
    Ok(())
}

async fn tick_rows(st: &Stage<'_>) -> Result<i64> {
    Ok(
        sqlx::query_scalar("select count(*) from lq.cron_ticks where kind = $1")
            .bind(CRON_KIND)
            .fetch_one(&st.pool)
            .await?,
    )
}

/// Waits, over up to 10 tick boundaries, for a worker other than `not` to hold the
/// schedule's row lock (a worker backend with a transaction id, in a transaction
/// whose last statement touched `lq.cron_*`), and `SIGSTOP`s it at once. A freeze
/// that came too late (the transaction ended anyway) is undone within ~60 ms and
/// tried again at the next boundary. Returns the frozen worker's index and since
/// when its transaction has been idle (database time), if caught, and the number
/// of near misses.
async fn catch_holder(
    st: &Stage<'_>,
    fleet: &Fleet,
    not: usize,
) -> Result<(Option<(usize, f64)>, u32)> {
    let mut misses = 0;
    for _ in 0..10 {
        let ports = worker_ports(fleet);
        let now = probe::db_now(&st.pool).await?;
        let aim = now.floor() + 1.0 - 0.003;
        if aim > now {
            tokio::time::sleep(Duration::from_secs_f64(aim - now)).await;
        }
        let until = Instant::now() + Duration::from_millis(150);
        while Instant::now() < until {
            let holders: Vec<i32> = sqlx::query_scalar(
                "select client_port from pg_stat_activity
                 where datname = current_database() and application_name = $1
                   and state <> 'idle' and backend_xid is not null and query like '%lq.cron\\_%'",
            )
            .bind(crate::WORKER_APP)
            .fetch_all(&st.pool)
            .await?;
            let hit = holders
                .iter()
                .filter_map(|p| u16::try_from(*p).ok().map(|port| (*p, port)))
                .filter_map(|(p, port)| ports.get(&port).map(|i| (p, *i)))
                .find(|(_, i)| *i != not);
            let Some((port, i)) = hit else { continue };
            let w = fleet.get(i).context("holder")?;
            w.signal("STOP")?;
            tokio::time::sleep(Duration::from_millis(60)).await;
            let stuck: Option<f64> = sqlx::query_scalar(
                "select extract(epoch from state_change)::float8 from pg_stat_activity
                 where client_port = $1 and backend_xid is not null
                   and state like 'idle in transaction%'
                   and state_change < clock_timestamp() - interval '40 ms'
                 limit 1",
            )
            .bind(port)
            .fetch_optional(&st.pool)
            .await?;
            if let Some(since) = stuck {
                return Ok((Some((i, since)), misses));
            }
            w.signal("CONT")?;
            misses += 1;
            break;
        }
    }
    Ok((None, misses))
}

/// Local TCP ports of the sockets of each running worker, by fleet index (from
/// `/proc`): `pg_stat_activity.client_port` names the process behind a backend.
fn worker_ports(fleet: &Fleet) -> HashMap<u16, usize> {
    let mut inodes = HashMap::new();
    for (i, _) in fleet.live() {
        let Some(pid) = fleet.get(i).map(|w| w.pid) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let link = link.to_string_lossy();
            if let Some(inode) = link
                .strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
            {
                inodes.insert(inode.to_owned(), i);
            }
        }
    }
    let mut ports = HashMap::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(inode)) = (f.get(1), f.get(9)) else {
                continue;
            };
            let port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if let (Some(port), Some(i)) = (port, inodes.get(*inode)) {
                ports.insert(port, *i);
            }
        }
    }
    ports
}

/// Worker backends idle in a transaction for more than 300 ms.
async fn stuck_transactions(st: &Stage<'_>) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "select count(*) from pg_stat_activity
         where datname = current_database() and application_name = $1
           and state like 'idle in transaction%' and state_change < clock_timestamp() - interval '300 ms'",
    )
    .bind(crate::WORKER_APP)
    .fetch_one(&st.pool)
    .await?)
}

/// The checks, by database time, over the whole seconds `first..=last`.
async fn analyse(st: &mut Stage<'_>, first: f64, last: f64) -> Result<()> {
    let (zero, one, more, n): (i64, i64, i64, i64) = sqlx::query_as(
        "with secs as (
             select generate_series(to_timestamp($2), to_timestamp($3), interval '1 second') as s
         ), per as (
             select secs.s, count(j.id) as jobs from secs
             left join lq.cron_ticks t on t.kind = $1 and t.tick = secs.s
             left join lq.all_jobs j on j.id = t.job_id and j.kind = $1
             group by secs.s
         )
         select count(*) filter (where jobs = 0), count(*) filter (where jobs = 1),
                count(*) filter (where jobs >= 2), count(*)
         from per",
    )
    .bind(CRON_KIND)
    .bind(first)
    .bind(last)
    .fetch_one(&st.pool)
    .await?;
    st.note(format!(
        "tick histogram: 0 -> {zero}, 1 -> {one}, 2+ -> {more} ({n} ticks)"
    ));
    if zero > 0 || more > 0 {
        let bad: Vec<(f64, i64)> = sqlx::query_as(
            "select extract(epoch from s)::float8, n from (
                 select secs.s, count(j.id) as n
                 from generate_series(to_timestamp($2), to_timestamp($3), interval '1 second') secs(s)
                 left join lq.cron_ticks t on t.kind = $1 and t.tick = secs.s
                 left join lq.all_jobs j on j.id = t.job_id and j.kind = $1
                 group by secs.s) x
             where n <> 1 order by 1",
        )
        .bind(CRON_KIND)
        .bind(first)
        .bind(last)
        .fetch_all(&st.pool)
        .await?;
        let shown: Vec<String> = bad
            .iter()
            .map(|(s, n)| format!("+{:.0}s: {n}", s - first))
            .collect();
        st.info(format!(
            "ticks without exactly one job: {}",
            shown.join(", ")
        ));
    }
    st.check(
        zero == 0,
        format!("{zero} ticks of the window produced no job"),
    );
    st.check(
        more == 0,
        format!("{more} ticks of the window produced 2+ jobs"),
    );
    st.check(
        n >= WINDOW_SECS as i64,
        format!("the window has {n} ticks, expected at least {WINDOW_SECS}"),
    );

    // Over every tick row and every job of the kind, in or out of the window.
    let (early, catch_up, odd, orphans, max_late, ticks, jobs): (
        i64,
        i64,
        i64,
        i64,
        Option<f64>,
        i64,
        i64,
    ) = sqlx::query_as(
        "select
             (select count(*) from lq.cron_ticks t left join lq.all_jobs j on j.id = t.job_id
              where t.kind = $1 and (t.fired_at < t.tick or j.created_at < t.tick)),
             (select count(*) from lq.cron_ticks where kind = $1 and catch_up),
             (select count(*) from lq.cron_ticks where kind = $1 and tick <> date_trunc('second', tick)),
             (select count(*) from lq.all_jobs j where j.kind = $1
                and not exists (select 1 from lq.cron_ticks t where t.kind = $1 and t.job_id = j.id)),
             (select extract(epoch from max(fired_at - tick))::float8 from lq.cron_ticks
              where kind = $1 and tick between to_timestamp($2) and to_timestamp($3)),
             (select count(*) from lq.cron_ticks where kind = $1),
             (select count(*) from lq.all_jobs where kind = $1)",
    )
    .bind(CRON_KIND)
    .bind(first)
    .bind(last)
    .fetch_one(&st.pool)
    .await?;
    st.info(format!(
        "{ticks} tick rows, {jobs} jobs in all; latest firing in the window {:.3}s after its tick",
        max_late.unwrap_or(0.0)
    ));
    let late: Vec<(f64, f64)> = sqlx::query_as(
        "select extract(epoch from tick)::float8, extract(epoch from fired_at - tick)::float8
         from lq.cron_ticks where kind = $1 and fired_at - tick > interval '100 ms' order by tick",
    )
    .bind(CRON_KIND)
    .fetch_all(&st.pool)
    .await?;
    if !late.is_empty() {
        let shown: Vec<String> = late
            .iter()
            .map(|(t, l)| format!("+{:.0}s fired {l:.3}s late", t - first))
            .collect();
        st.info(format!("late ticks: {}", shown.join(", ")));
    }
    st.check(
        early == 0,
        format!("{early} ticks fired (or their job created) before the tick"),
    );
    st.check(
        catch_up == 0,
        format!("{catch_up} catch-up ticks, though a runtime was always alive"),
    );
    st.check(odd == 0, format!("{odd} ticks not on a whole second"));
    st.check(
        orphans == 0,
        format!("{orphans} {CRON_KIND} jobs without a tick row"),
    );

    // Every job of the window must succeed; later ones are held to the same
    // standard once performed (the rest were still queued at shutdown).
    let ids: Vec<(i64, bool)> = sqlx::query_as(
        "select j.id, t.tick <= to_timestamp($2) from lq.all_jobs j
         join lq.cron_ticks t on t.kind = $1 and t.job_id = j.id
         where j.kind = $1 and (t.tick <= to_timestamp($2) or j.state <> 'queued')",
    )
    .bind(CRON_KIND)
    .bind(last)
    .fetch_all(&st.pool)
    .await?;
    let after = ids.iter().filter(|(_, inside)| !inside).count();
    for (id, _) in ids {
        st.ledger.ack(id, Expect::Succeed);
    }
    st.info(format!(
        "{} jobs held to the usual classification ({after} of ticks after the window)",
        st.ledger.expect.len()
    ));
    Ok(())
}
