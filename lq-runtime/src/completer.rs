//! The completer: acknowledges successes in batches, one fenced statement per batch.

use std::{sync::Arc, time::Duration};

use lq_core::{chain, db, Error};
use tokio::{sync::mpsc, time::Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn, Instrument};
use uuid::Uuid;

use crate::{
    hot_conn::HotConn,
    quarantine::{quarantine, Quarantine},
    shared::retry_delay,
    shared::Shared,
    slots::Slot,
    stats::Stats,
    tally::Recorded,
};

/// A job whose `perform` returned `Ok`, waiting to be marked succeeded. It keeps
/// its lease slot until the write lands, so a queue never holds more than
/// `LEASES_PER_HANDLER` times its concurrency of leased jobs.
#[derive(Debug)]
pub(crate) struct Completion {
    pub id: i64,
    pub token: Uuid,
    /// The attempt's number, to find a success whose answer was lost.
    pub attempt: i32,
    /// Its kind and queue, to count the success where it belongs.
    pub kind: &'static str,
    pub queue: Arc<str>,
    /// Freed, with the rest of its batch, once the write lands.
    pub slot: Slot,
}

/// Drains `rx` until every sender is gone, writing whatever has accumulated while
/// the previous statement ran: batches grow with load and latency stays one round
/// trip when idle.
///
/// `stop` fires once every job task has finished: what is left in the channel is
/// written, then the completer returns.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut rx: mpsc::Receiver<Completion>,
    stop: CancellationToken,
) {
    let max = shared.config.max_complete_batch.max(1);
    let mut conn = HotConn::new(shared.completer_pool.clone(), true);
    let mut batch = Vec::with_capacity(max);
    // Successes whose rows another session holds locked, tried again on their own
    // every `LOCKED_RETRY` so that they hold back no other batch.
    let mut locked: Vec<Completion> = Vec::new();
    let mut retry_at = Instant::now();
    let metrics = crate::telemetry::FlushMetrics::new();
    loop {
        let got = tokio::select! {
            n = rx.recv_many(&mut batch, max) => n,
            _ = tokio::time::sleep_until(retry_at), if !locked.is_empty() => {
                let again = std::mem::take(&mut locked);
                locked = write_and_release(&shared, &mut conn, again, &metrics, Try::SkipLocked).await;
                retry_at = Instant::now() + LOCKED_RETRY;
                continue;
            }
            _ = stop.cancelled() => {
                while let Ok(c) = rx.try_recv() {
                    batch.push(c);
                }
                while !batch.is_empty() {
                    let rest = batch.split_off(batch.len().min(max));
                    let chunk = std::mem::replace(&mut batch, rest);
                    locked.extend(write_and_release(&shared, &mut conn, chunk, &metrics, Try::Wait).await);
                }
                // One last try without waiting; what is still locked is left to
                // its lease's expiry (it runs again: at-least-once).
                let left = write_and_release(&shared, &mut conn, locked, &metrics, Try::SkipLocked).await;
                if !left.is_empty() {
                    warn!(
                        jobs = left.len(),
                        "successes not written at shutdown: their rows are locked by another session; the jobs run again after their leases expire"
                    );
                    for c in &left {
                        shared.inflight.remove(c.id, c.token);
                    }
                    Slot::release_all(left.into_iter().map(|c| c.slot));
                }
                return;
            }
        };
        if got == 0 {
            return; // every sender is gone
        }
        gather_ready(&mut rx, &mut batch, max).await;
        let written = std::mem::replace(&mut batch, Vec::with_capacity(max));
        let newly_locked =
            write_and_release(&shared, &mut conn, written, &metrics, Try::Wait).await;
        if !newly_locked.is_empty() {
            if locked.is_empty() {
                retry_at = Instant::now() + LOCKED_RETRY;
            }
            locked.extend(newly_locked);
        }
    }
}

/// The completer's connection setting `lock_timeout`: a tenth of `db_timeout`,
/// at least 100 ms, and always under half the server's statement bound (nine
/// tenths of `db_timeout`), so a row lock fails the write as a lock timeout, which
/// the fallback below handles, never as a statement timeout. A success write
/// waits for a row lock only while another write of the row finishes (a
/// heartbeat, a cancel request), a few milliseconds; a row held longer (an
/// operator's open transaction) fails the write, and the batch is written again
/// skipping the locked rows (see [`write`]).
pub(crate) fn lock_timeout(db_timeout: Duration) -> (&'static str, String) {
    let statement_ms = db_timeout.as_millis() * 9 / 10;
    let ms = (db_timeout.as_millis() / 10)
        .max(100)
        .min(statement_ms / 2)
        .max(1);
    ("lock_timeout", ms.to_string())
}

/// How a write treats rows another session holds locked.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Try {
    /// Wait for them, up to the connection's `lock_timeout` (the usual write:
    /// it needs no lock record per row).
    Wait,
    /// Skip them (successes already found locked).
    SkipLocked,
}

/// How often successes whose rows were locked elsewhere are tried again.
const LOCKED_RETRY: Duration = Duration::from_secs(1);

/// Writes `batch`, frees the lease slots of the completions written (or found
/// lost), and returns those whose rows another session held locked.
async fn write_and_release(
    shared: &Shared,
    conn: &mut HotConn,
    batch: Vec<Completion>,
    metrics: &crate::telemetry::FlushMetrics,
    first: Try,
) -> Vec<Completion> {
    if batch.is_empty() {
        return batch;
    }
    let locked = write(shared, conn, &batch, metrics, first)
        .instrument(crate::telemetry::flush_span(batch.len()))
        .await;
    if locked.is_empty() {
        Slot::release_all(batch.into_iter().map(|c| c.slot));
        return Vec::new();
    }
    let (kept, written): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .enumerate()
        .partition(|(i, _)| locked.contains(i));
    Slot::release_all(written.into_iter().map(|(_, c)| c.slot));
    kept.into_iter().map(|(_, c)| c).collect()
}

/// Most scheduler passes [`gather_ready`] waits through for more completions.
const GATHER_PASSES: usize = 4;

/// Lets the tasks that are ready to run go first, and adds the completions they
/// send to `batch`, so one statement covers a claim's batch instead of a small
/// write now and a second one for the rest. It gives up the thread, not time: on
/// an idle runtime a yield returns at once, so a lone job is not held back.
async fn gather_ready(
    rx: &mut mpsc::Receiver<Completion>,
    batch: &mut Vec<Completion>,
    max: usize,
) {
    for _ in 0..GATHER_PASSES {
        if batch.len() >= max {
            return;
        }
        tokio::task::yield_now().await;
        let before = batch.len();
        while batch.len() < max {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        if batch.len() == before {
            return; // nothing more was ready
        }
    }
}

/// Counts each of the `settled` completions as succeeded when its id is in
/// `done`, dead when in `quarantined`, as a lost lease otherwise.
fn tally<'a>(
    shared: &Shared,
    settled: impl Iterator<Item = &'a Completion>,
    count: usize,
    done: &[i64],
    quarantined: &[i64],
) {
    let all_done = done.len() == count;
    let done: std::collections::HashSet<i64> = if all_done {
        Default::default()
    } else {
        done.iter().copied().collect()
    };
    for c in settled {
        let recorded = if all_done || done.contains(&c.id) {
            Recorded::Succeeded
        } else if quarantined.contains(&c.id) {
            Recorded::Dead
        } else {
            Recorded::LeaseLost
        };
        if let Some(t) = shared.tallies.get(&c.queue, c.kind) {
            t.finished(recorded);
        }
    }
}

/// Writes the successes of `batch`. Returns the positions of those whose rows
/// another session holds locked: they are neither written nor lost, and their
/// leases stay held (and renewed once the lock goes) until a later try writes
/// them. A write that waited past the completer's `lock_timeout` is sent again
/// skipping locked rows, so the others land at once; a table locked elsewhere
/// leaves the whole range for the next try.
async fn write(
    shared: &Shared,
    conn: &mut HotConn,
    batch: &[Completion],
    metrics: &crate::telemetry::FlushMetrics,
    first: Try,
) -> Vec<usize> {
    let ids: Vec<i64> = batch.iter().map(|c| c.id).collect();
    let tokens: Vec<Uuid> = batch.iter().map(|c| c.token).collect();
    let began = std::time::Instant::now();
    let mut done = Vec::with_capacity(ids.len());
    let mut quarantined = Vec::new();
    let mut locked = Vec::new();
    // A batch the database refuses is split in halves until the rows it refuses
    // are alone, so one bad row never holds back the rows beside it.
    let mut pending = Vec::with_capacity(8);
    pending.push(0..ids.len());
    while let Some(range) = pending.pop() {
        let single = range.len() == 1;
        let written = match first {
            Try::Wait => {
                write_rows(
                    shared,
                    conn,
                    &ids[range.clone()],
                    &tokens[range.clone()],
                    Mode::Plain,
                )
                .await
            }
            Try::SkipLocked => Err(NotWritten::Locked(None)),
        };
        let written = match written {
            Err(NotWritten::Locked(_)) => {
                let announce = first == Try::Wait;
                write_unlocked(
                    shared,
                    conn,
                    &ids,
                    &tokens,
                    range.clone(),
                    &mut locked,
                    announce,
                )
                .await
            }
            other => other,
        };
        match written {
            Ok(rows) => done.extend(rows),
            Err(NotWritten::Refused(_)) if !single => {
                let mid = range.start + range.len() / 2;
                pending.push(mid..range.end);
                pending.push(range.start..mid);
            }
            Err(NotWritten::Refused(e)) => {
                let (id, token) = (ids[range.start], tokens[range.start]);
                let attempt = batch[range.start].attempt;
                match write_alone(shared, conn, id, token, attempt, &e).await {
                    Alone::Ended(id) => done.extend(id),
                    Alone::Quarantined => quarantined.push(id),
                    Alone::Locked => locked.push(range.start),
                }
            }
            Err(NotWritten::Locked(e)) => {
                // The table, not a row, is locked elsewhere: all of them later.
                if first == Try::Wait {
                    warn!(
                        jobs = range.len(),
                        error = e.as_ref().map(|e| chain(e).to_string()),
                        "successes not written yet: lq.jobs is locked by another session; trying again every second"
                    );
                }
                locked.extend(range);
            }
            Err(NotWritten::GaveUp) => {} // at shutdown: left to lease expiry
        }
    }
    let secs = began.elapsed().as_secs_f64();
    debug!(jobs = ids.len(), ms = secs * 1e3, "marked succeeded");
    metrics.flushed(ids.len(), secs);
    let settled = ids.len() - locked.len();
    let is_settled = |i: &usize| !locked.contains(i);
    if done.len() + quarantined.len() < settled {
        let seemingly_lost: Vec<&Completion> = batch
            .iter()
            .enumerate()
            .filter(|(i, c)| is_settled(i) && !done.contains(&c.id) && !quarantined.contains(&c.id))
            .map(|(_, c)| c)
            .collect();
        done.extend(landed_unheard(shared, conn, &seemingly_lost).await);
    }
    tally(
        shared,
        batch
            .iter()
            .enumerate()
            .filter(|(i, _)| is_settled(i))
            .map(|(_, c)| c),
        settled,
        &done,
        &quarantined,
    );
    Stats::add(&shared.stats.succeeded, done.len() as u64);
    let lost = settled - done.len() - quarantined.len();
    if lost > 0 {
        Stats::add(&shared.stats.lease_lost, lost as u64);
        warn!(
            lost,
            "jobs finished after their lease was lost; another worker may run them again"
        );
    }
    if locked.is_empty() {
        shared.inflight.remove_all(&ids, &tokens);
    } else {
        let (ids, tokens): (Vec<i64>, Vec<Uuid>) = (0..ids.len())
            .filter(is_settled)
            .map(|i| (ids[i], tokens[i]))
            .unzip();
        shared.inflight.remove_all(&ids, &tokens);
    }
    locked
}

/// Of `seemingly_lost`, successes not written by the last try, those an earlier
/// try wrote though its answer was lost (the history holds them, ended by this
/// runtime at that attempt); the rest lost their lease. The lookup is tried as
/// often as an outcome write (`executor::outcome_tries_spent`): the connection
/// that lost one answer may lose the next few; if it never answers, they all
/// count as lost.
async fn landed_unheard(
    shared: &Shared,
    conn: &mut HotConn,
    seemingly_lost: &[&Completion],
) -> Vec<i64> {
    let ids: Vec<i64> = seemingly_lost.iter().map(|c| c.id).collect();
    let attempts: Vec<i32> = seemingly_lost.iter().map(|c| c.attempt).collect();
    let mut failures = 0;
    loop {
        let found = async {
            let c = conn.get("job_successes_in_history").await?;
            let owner = &shared.config.owner;
            let lookup = db::finish::job_successes_in_history(c, &ids, &attempts, owner);
            db::timed("job_successes_in_history", shared.config.db_timeout, lookup).await
        }
        .await;
        match found {
            Ok(landed) => return landed,
            Err(e) => {
                conn.discard();
                failures += 1;
                debug!(error = %chain(&e), failures, "could not tell lost leases from unheard successes");
                if crate::executor::outcome_tries_spent(shared, failures) {
                    return Vec::new();
                }
                tokio::time::sleep(retry_delay(failures)).await;
            }
        }
    }
}

/// Writes the rows of `range` that no other session holds locked, without waiting
/// for the others, and adds to `locked` the positions of those still leased to
/// this runtime but locked elsewhere; the rest of the range was lost. With
/// `announce`, each newly found locked row is logged (not again at each retry).
async fn write_unlocked(
    shared: &Shared,
    conn: &mut HotConn,
    ids: &[i64],
    tokens: &[Uuid],
    range: std::ops::Range<usize>,
    locked: &mut Vec<usize>,
    announce: bool,
) -> Result<Vec<i64>, NotWritten> {
    let written = write_rows(
        shared,
        conn,
        &ids[range.clone()],
        &tokens[range.clone()],
        Mode::SkipLocked,
    )
    .await?;
    if written.len() == range.len() {
        return Ok(written);
    }
    let written_set: std::collections::HashSet<i64> = written.iter().copied().collect();
    let rest: Vec<usize> = range.filter(|i| !written_set.contains(&ids[*i])).collect();
    let (rest_ids, rest_tokens): (Vec<i64>, Vec<Uuid>) =
        rest.iter().map(|&i| (ids[i], tokens[i])).unzip();
    let held = async {
        let c = conn.get("job_leases_still_held").await?;
        let t = shared.config.db_timeout;
        let stmt = db::lease::job_leases_still_held(c, &rest_ids, &rest_tokens);
        db::timed("job_leases_still_held", t, stmt).await
    }
    .await;
    let newly_locked: Vec<usize> = match held {
        Ok(held) => rest
            .into_iter()
            .filter(|i| held.contains(&ids[*i]))
            .filter(|i| !locked.contains(i))
            .collect(),
        // Not known: kept for the next try, which tells a lost lease then.
        Err(_) => rest.into_iter().filter(|i| !locked.contains(i)).collect(),
    };
    if announce {
        for &i in &newly_locked {
            warn!(
                id = ids[i],
                "success not written yet: another session holds the job's row locked; trying again every second"
            );
        }
    }
    locked.extend(newly_locked);
    Ok(written)
}

/// What became of a success written alone after the database refused it.
enum Alone {
    /// Written (`Some(id)`: ended `succeeded` or `cancelled`), lost, or given
    /// up at shutdown or after the quarantine failed too (`None`).
    Ended(Option<i64>),
    /// Refused again, and quarantined: ended `dead`.
    Quarantined,
    /// Its row is locked elsewhere: tried again later.
    Locked,
}

/// One success the database refused on its own (`refused`): written again with a
/// move to the history that overwrites a row of the same id, and if that is
/// refused too, quarantined (ended `dead`, the reason stored) so its slot and
/// lease are freed.
async fn write_alone(
    shared: &Shared,
    conn: &mut HotConn,
    id: i64,
    token: Uuid,
    attempt: i32,
    refused: &Error,
) -> Alone {
    warn!(id, error = %chain(refused), "success refused; writing it alone, over any history row with its id");
    let e = match write_rows(shared, conn, &[id], &[token], Mode::Replacing).await {
        Ok(rows) => return Alone::Ended(rows.first().copied()),
        Err(NotWritten::GaveUp) => return Alone::Ended(None),
        Err(NotWritten::Locked(_)) => return Alone::Locked,
        Err(NotWritten::Refused(e)) => e,
    };
    let reason = format!(
        "quarantined: the handler succeeded but the success was refused ({})",
        chain(&e)
    );
    match quarantine(shared, id, token, attempt, &reason).await {
        Quarantine::Ended => {
            error!(id, error = %chain(&e), "job quarantined as dead: its success was refused");
            Alone::Quarantined
        }
        Quarantine::NotHeld => Alone::Ended(None),
        Quarantine::NotWritten(q) => {
            error!(id, error = %chain(&q), "could not quarantine a job whose success was refused; it returns when its lease expires");
            Alone::Ended(None)
        }
    }
}

/// Why a success write did not land.
enum NotWritten {
    /// The database refused these rows (see [`db::is_data_rejection`]), or
    /// cancelled a write of several at the statement bound: written in halves.
    Refused(Error),
    /// A row (or the table) was locked by another session for longer than the
    /// completer's `lock_timeout` (SQLSTATE 55P03); `None` when not tried yet.
    Locked(Option<Error>),
    /// Gave up after shutdown: left to the leases' expiry.
    GaveUp,
}

/// Which success statement [`write_rows`] sends.
#[derive(Clone, Copy)]
enum Mode {
    /// `db::finish::job_complete_many`.
    Plain,
    /// `db::finish::job_complete_many_replacing`.
    Replacing,
    /// `db::finish::job_complete_unlocked`.
    SkipLocked,
}

/// Writes the successes of `ids`, retrying failures of the connection or the
/// server; see [`NotWritten`] for the rest.
async fn write_rows(
    shared: &Shared,
    conn: &mut HotConn,
    ids: &[i64],
    tokens: &[Uuid],
    mode: Mode,
) -> Result<Vec<i64>, NotWritten> {
    let mut failures = 0u32;
    loop {
        let r = async {
            let c = conn.get("job_complete_many").await?;
            db::timed("job_complete_many", shared.config.db_timeout, async {
                match mode {
                    Mode::Plain => db::finish::job_complete_many(c, ids, tokens).await,
                    Mode::Replacing => {
                        db::finish::job_complete_many_replacing(c, ids, tokens).await
                    }
                    Mode::SkipLocked => db::finish::job_complete_unlocked(c, ids, tokens).await,
                }
            })
            .await
        }
        .await;
        let e = match r {
            Ok(done) => return Ok(done),
            Err(e) => e,
        };
        let sqlstate = db::sqlstate(&e);
        if db::is_data_rejection(&e) {
            return Err(NotWritten::Refused(e));
        }
        if sqlstate.as_deref() == Some(db::LOCK_NOT_AVAILABLE) {
            return Err(NotWritten::Locked(Some(e)));
        }
        // Anything else may be the connection's state, not the rows': a broken
        // socket, or a server that became a read-only standby in a failover
        // (25006), where a kept connection would fail every write for good. The
        // next try opens a fresh one.
        conn.discard();
        if sqlstate.as_deref() == Some(db::QUERY_CANCELED) && ids.len() > 1 {
            // Cancelled by the statement bound: the same batch would be cancelled
            // again, so it is written in halves.
            return Err(NotWritten::Refused(e));
        }
        failures += 1;
        warn!(jobs = ids.len(), error = %chain(&e), "could not mark jobs succeeded; retrying");
        if shared.hard_stop.is_cancelled() && failures >= 3 {
            // Leave them to lease expiry: they will run again (at-least-once).
            return Err(NotWritten::GaveUp);
        }
        tokio::time::sleep(retry_delay(failures)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slots::Slots;

    #[test]
    fn a_row_lock_fails_the_write_before_the_statement_bound_does() {
        let ms = |d: Duration| lock_timeout(d).1.parse::<u128>().unwrap();
        assert_eq!(ms(Duration::from_secs(10)), 1000);
        assert_eq!(ms(Duration::from_millis(500)), 100);
        for d in [1u64, 10, 100, 112, 200, 500, 10_000] {
            let d = Duration::from_millis(d);
            let statement = db::statement_timeout_within(d).1.parse::<u128>().unwrap();
            assert!(
                ms(d) < statement || statement == 1,
                "{d:?}: {} vs {statement}",
                ms(d)
            );
        }
    }

    fn completion(slots: &Slots, id: i64) -> Completion {
        Completion {
            id,
            token: Uuid::new_v4(),
            attempt: 1,
            kind: "test",
            queue: Arc::from("q"),
            slot: slots.take().expect("a free slot"),
        }
    }

    /// On a one-thread runtime a spawned task cannot run while this test's task
    /// does, so the nine sends happen only if `gather_ready` gives up the thread.
    #[tokio::test(flavor = "current_thread")]
    async fn completions_sent_by_tasks_ready_to_run_join_the_batch() {
        let slots = Arc::new(Slots::new(10, 0));
        let (tx, mut rx) = mpsc::channel(16);
        tx.send(completion(&slots, 0)).await.unwrap();
        for id in 1..10 {
            let (tx, slots) = (tx.clone(), slots.clone());
            tokio::spawn(async move { tx.send(completion(&slots, id)).await.unwrap() });
        }
        let mut batch = Vec::new();
        assert_eq!(rx.recv_many(&mut batch, 100).await, 1);
        gather_ready(&mut rx, &mut batch, 100).await;
        let mut ids: Vec<i64> = batch.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..10).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn gathering_stops_at_the_batch_limit() {
        let slots = Slots::new(10, 0);
        let (tx, mut rx) = mpsc::channel(16);
        for id in 0..10 {
            tx.send(completion(&slots, id)).await.unwrap();
        }
        let mut batch = Vec::new();
        rx.recv_many(&mut batch, 4).await;
        gather_ready(&mut rx, &mut batch, 4).await;
        assert_eq!(batch.len(), 4);
        assert_eq!(rx.len(), 6);
    }
}
