//! Coalesced wake-up NOTIFYs for autocommit enqueues.
//!
//! NOTIFY takes a database-wide lock at commit, so a burst of single-job enqueues
//! that each sent one would serialise their commits. An enqueue on a `&PgPool`
//! commits when its statement returns; it then pokes this notifier instead, which
//! keeps at most one NOTIFY in flight per (database, queue) in this process and
//! sends one more after it if anything was poked meanwhile, but no sooner than
//! [`MIN_GAP`] after the previous one started. Every poke is followed by a NOTIFY
//! that starts after it, so no enqueue waits for a poll; a lone enqueue is
//! notified at once, and a burst costs at most one NOTIFY per gap instead of about
//! one per enqueue (each is its own transaction and takes that lock).
//! Enqueues in a transaction keep an in-transaction NOTIFY (PostgreSQL sends it at
//! commit, once per queue per transaction).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, OnceLock,
    },
    time::Duration,
};

use tokio::time::Instant;

use sqlx::PgPool;

use crate::db;

/// Bound on one NOTIFY.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Least time between the starts of two NOTIFYs for one queue. Far below what a
/// woken worker needs to claim, so the wake-up of a burst is not slower, and it
/// caps the NOTIFYs of a busy producer at 1,000 a second.
const MIN_GAP: Duration = Duration::from_millis(1);

#[derive(Default)]
struct Slot {
    pending: AtomicBool,
    sending: AtomicBool,
    /// When the last NOTIFY started; only the sending task touches it.
    last_sent: Mutex<Option<Instant>>,
}

fn slots() -> &'static Mutex<HashMap<String, Arc<Slot>>> {
    static SLOTS: OnceLock<Mutex<HashMap<String, Arc<Slot>>>> = OnceLock::new();
    SLOTS.get_or_init(Default::default)
}

/// Asks for a wake-up NOTIFY on `queue` after a committed autocommit enqueue.
pub(crate) fn poke(pool: &PgPool, queue: &str) {
    let opts = pool.connect_options();
    let key = format!(
        "{}:{}/{}/{queue}",
        opts.get_host(),
        opts.get_port(),
        opts.get_database().unwrap_or("")
    );
    let slot = {
        let mut map = slots().lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key).or_default().clone()
    };
    slot.pending.store(true, Ordering::SeqCst);
    if slot
        .sending
        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        tokio::spawn(send_while_pending(pool.clone(), queue.to_owned(), slot));
    }
}

async fn send_while_pending(pool: PgPool, queue: String, slot: Arc<Slot>) {
    loop {
        if slot.pending.load(Ordering::SeqCst) {
            // Wait out the gap only when the last NOTIFY was that recent (a burst):
            // pokes meanwhile are coalesced into the one that follows.
            let last = *slot.last_sent.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(last) = last.filter(|l| l.elapsed() < MIN_GAP) {
                tokio::time::sleep_until(last + MIN_GAP).await;
            }
            slot.pending.store(false, Ordering::SeqCst);
            *slot.last_sent.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            let sent = db::timed(
                "queue_notify",
                NOTIFY_TIMEOUT,
                db::enqueue::queue_notify(&pool, &queue),
            )
            .await;
            if let Err(e) = sent {
                // Only a hint: workers poll anyway.
                tracing::debug!(queue, error = %crate::chain(&e), "wake-up NOTIFY failed");
            }
            continue;
        }
        slot.sending.store(false, Ordering::SeqCst);
        // A poke may have landed after the check above: take it over.
        if !(slot.pending.load(Ordering::SeqCst)
            && slot
                .sending
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok())
        {
            return;
        }
    }
}
