//! The completer: acknowledges successes in batches, one fenced statement per batch.

use std::{sync::Arc, time::Duration};

use lq_core::{chain, db, Error};
use tokio::{sync::mpsc, time::Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn, Instrument};
use uuid::Uuid;

use crate::{
    hot_conn::HotConn, shared::retry_delay, shared::Shared, slots::Slot, stats::Stats,
    tally::Recorded,
};

/// A job whose `perform` returned `Ok`, waiting to be marked succeeded. It keeps
/// its lease slot until the write lands, so a queue never holds more than
/// `LEASES_PER_HANDLER` times its concurrency of leased jobs.
#[derive(Debug)]
pub(crate) struct Completion {
    pub id: i64,
    pub token: Uuid,
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
                locked = write_and_release(&shared, &mut conn, again, &metrics).await;
                retry_at = Instant::now() + LOCKED_RETRY;
                continue;
            }
            _ = stop.cancelled() => {
                while let Ok(c) = rx.try_recv() {
                    batch.push(c);
                }
                batch.append(&mut locked);
                while !batch.is_empty() {
                    let rest = batch.split_off(batch.len().min(max));
                    let chunk = std::mem::replace(&mut batch, rest);
                    // Still locked at shutdown: left to their leases' expiry
                    // (they run again: at-least-once).
                    let left = write_and_release(&shared, &mut conn, chunk, &metrics).await;
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
        let newly_locked = write_and_release(&shared, &mut conn, written, &metrics).await;
        if !newly_locked.is_empty() {
            if locked.is_empty() {
                retry_at = Instant::now() + LOCKED_RETRY;
            }
            locked.extend(newly_locked);
        }
    }
}

/// The completer's connection setting `lock_timeout`: a tenth of `db_timeout`.
/// A success write waits for a row lock only while another write of the row
/// finishes (a heartbeat, a cancel request), a few milliseconds; a row held
/// longer (an operator's open transaction) fails the write fast, and the batch is
/// split so that the other successes land (see [`write`]).
pub(crate) fn lock_timeout(db_timeout: Duration) -> (&'static str, String) {
    let ms = (db_timeout.as_millis() / 10).max(10);
    ("lock_timeout", ms.to_string())
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
) -> Vec<Completion> {
    let locked = write(shared, conn, &batch, metrics)
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
/// `done`, as a lost lease otherwise.
fn tally<'a>(
    shared: &Shared,
    settled: impl Iterator<Item = &'a Completion>,
    count: usize,
    done: &[i64],
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
        } else {
            Recorded::LeaseLost
        };
        if let Some(t) = shared.tallies.get(&c.queue, c.kind) {
            t.finished(recorded);
        }
    }
}

/// Writes the successes of `batch`. Returns the positions of those whose rows
/// another session held locked past the completer's `lock_timeout`: they are
/// neither written nor lost, and their leases stay held (and renewed once the
/// lock goes) until a later try writes them.
async fn write(
    shared: &Shared,
    conn: &mut HotConn,
    batch: &[Completion],
    metrics: &crate::telemetry::FlushMetrics,
) -> Vec<usize> {
    let ids: Vec<i64> = batch.iter().map(|c| c.id).collect();
    let tokens: Vec<Uuid> = batch.iter().map(|c| c.token).collect();
    let began = std::time::Instant::now();
    let mut done = Vec::with_capacity(ids.len());
    let mut locked = Vec::new();
    // A batch the database refuses, or that waits too long for a row locked
    // elsewhere, is split in halves until the rows in question are alone, so one
    // row never holds back the rows beside it.
    let mut pending = Vec::with_capacity(8);
    pending.push(0..ids.len());
    while let Some(range) = pending.pop() {
        let single = range.len() == 1;
        match write_rows(
            shared,
            conn,
            &ids[range.clone()],
            &tokens[range.clone()],
            false,
        )
        .await
        {
            Ok(rows) => done.extend(rows),
            Err(NotWritten::Refused(_) | NotWritten::Locked(_)) if !single => {
                let mid = range.start + range.len() / 2;
                pending.push(mid..range.end);
                pending.push(range.start..mid);
            }
            Err(NotWritten::Refused(e)) => {
                match write_alone(shared, conn, ids[range.start], tokens[range.start], &e).await {
                    Alone::Ended(id) => done.extend(id),
                    Alone::Locked => locked.push(range.start),
                }
            }
            Err(NotWritten::Locked(e)) => {
                warn!(
                    id = ids[range.start],
                    error = %chain(&e),
                    "success not written yet: another session holds the job's row locked; trying again in 1 s"
                );
                locked.push(range.start);
            }
            Err(NotWritten::GaveUp) => {} // at shutdown: left to lease expiry
        }
    }
    let secs = began.elapsed().as_secs_f64();
    debug!(jobs = ids.len(), ms = secs * 1e3, "marked succeeded");
    metrics.flushed(ids.len(), secs);
    let settled = ids.len() - locked.len();
    let is_settled = |i: &usize| !locked.contains(i);
    tally(
        shared,
        batch
            .iter()
            .enumerate()
            .filter(|(i, _)| is_settled(i))
            .map(|(_, c)| c),
        settled,
        &done,
    );
    Stats::add(&shared.stats.succeeded, done.len() as u64);
    let lost = settled - done.len();
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

/// What became of a success written alone after the database refused it.
enum Alone {
    /// Written (`Some(id)`: ended `succeeded` or `cancelled`), quarantined, lost
    /// or given up at shutdown (`None`).
    Ended(Option<i64>),
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
    refused: &Error,
) -> Alone {
    warn!(id, error = %chain(refused), "success refused; writing it alone, over any history row with its id");
    let e = match write_rows(shared, conn, &[id], &[token], true).await {
        Ok(rows) => return Alone::Ended(rows.first().copied()),
        Err(NotWritten::GaveUp) => return Alone::Ended(None),
        Err(NotWritten::Locked(_)) => return Alone::Locked,
        Err(NotWritten::Refused(e)) => e,
    };
    let reason = format!(
        "quarantined: the handler succeeded but the success was refused ({})",
        chain(&e)
    );
    let q = shared
        .with_conn("job_quarantine", |mut c| {
            let reason = &reason;
            async move { db::finish::job_quarantine(&mut c, id, Some(token), reason).await }
        })
        .await;
    match q {
        Ok(true) => {
            Stats::add(&shared.stats.quarantined, 1);
            error!(id, error = %chain(&e), "job quarantined as dead: its success was refused");
        }
        Ok(false) => {}
        Err(q) => {
            error!(id, error = %chain(&q), "could not quarantine a job whose success was refused; it returns when its lease expires")
        }
    }
    Alone::Ended(None)
}

/// Why a success write did not land.
enum NotWritten {
    /// The database refused these rows (see [`db::is_data_rejection`]).
    Refused(Error),
    /// A row was locked by another session for longer than the completer's
    /// `lock_timeout` (SQLSTATE 55P03).
    Locked(Error),
    /// Gave up after shutdown: left to the leases' expiry.
    GaveUp,
}

/// Writes the successes of `ids`, retrying failures of the connection or the
/// server; see [`NotWritten`] for the rest.
async fn write_rows(
    shared: &Shared,
    conn: &mut HotConn,
    ids: &[i64],
    tokens: &[Uuid],
    replacing: bool,
) -> Result<Vec<i64>, NotWritten> {
    let mut failures = 0u32;
    loop {
        let r = db::timed("job_complete_many", shared.config.db_timeout, async {
            let c = conn.get("job_complete_many").await?;
            if replacing {
                db::finish::job_complete_many_replacing(c, ids, tokens).await
            } else {
                db::finish::job_complete_many(c, ids, tokens).await
            }
        })
        .await;
        let e = match r {
            Ok(done) => return Ok(done),
            Err(e) => e,
        };
        conn.discard();
        if db::is_data_rejection(&e) {
            return Err(NotWritten::Refused(e));
        }
        if db::sqlstate(&e).as_deref() == Some(db::LOCK_NOT_AVAILABLE) {
            return Err(NotWritten::Locked(e));
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

    fn completion(slots: &Slots, id: i64) -> Completion {
        Completion {
            id,
            token: Uuid::new_v4(),
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
