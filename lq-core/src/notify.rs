//! Coalesced wake-up NOTIFYs for autocommit enqueues, on a connection of their own.
//!
//! NOTIFY takes a database-wide lock at commit, so a burst of single-job enqueues
//! that each sent one would serialise their commits. An enqueue on a `&PgPool`
//! commits when its statement returns; it then pokes this notifier instead. Per
//! database, one sender task sends one NOTIFY for every queue poked since its last
//! one, paced by a token bucket ([`pacer`]: 1,000 a second on average, a few at
//! once, and 250 a second while the process makes over 1,000 enqueue calls a
//! second).
//! Every poke is followed by a NOTIFY that starts after it, so no enqueue waits
//! for a poll; a producer below the rate is notified at once, and one above it has
//! its pokes coalesced.
//!
//! The sender keeps a connection of its own (`application_name` [`APP_NAME`]) and
//! closes it after [`IDLE`] without pokes: borrowing one from the application's
//! pool would hold up the application's next statement when the pool is small
//! (measured: 0.44 of the single-row insert ceiling with one producer, against
//! 0.75 without NOTIFY). If that connection cannot be opened or fails, the NOTIFY
//! goes through the application's pool instead, and the next one reconnects.
//! Either way the NOTIFY's transaction does not wait for its WAL flush
//! ([`db::enqueue::queues_notify`]): it carries no data, so the wake-up reaches the
//! workers one disk flush sooner.
//!
//! Enqueues in a transaction keep an in-transaction NOTIFY (PostgreSQL sends it at
//! commit, once per queue per transaction).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard, OnceLock,
    },
    time::Duration,
};

use sqlx::{postgres::PgConnectOptions, Connection, PgConnection, PgPool};
use tokio::{sync::Notify, time::Instant};

use crate::db;

mod pacer;

use pacer::Pacer;

/// Bound on one NOTIFY, connecting included.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the sender keeps its connection without a poke. Long enough that an
/// application enqueueing now and then does not pay a connect (several ms) per
/// job; short enough that an idle process holds no extra connection for long.
const IDLE: Duration = Duration::from_secs(30);

/// `application_name` of the sender's connection, to find it in `pg_stat_activity`.
const APP_NAME: &str = "lq-notifier";

/// One database's notifier.
#[derive(Default)]
struct Notifier {
    work: Mutex<Work>,
    /// Whether a sender task is alive for this database.
    running: AtomicBool,
    /// Wakes a sender that waits for pokes.
    wake: Notify,
}

/// Pokes not yet sent.
#[derive(Default)]
struct Work {
    queues: Vec<String>,
    /// Enqueues that asked for these NOTIFYs, for the pacer's rate.
    pokes: u64,
    /// The pool of a poker, kept only while there is work, as the fallback path:
    /// an idle notifier must not keep an application's pool alive.
    pool: Option<PgPool>,
}

impl Notifier {
    fn work(&self) -> MutexGuard<'_, Work> {
        self.work.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn has_work(&self) -> bool {
        !self.work().queues.is_empty()
    }
}

fn notifiers() -> &'static Mutex<HashMap<String, Arc<Notifier>>> {
    static NOTIFIERS: OnceLock<Mutex<HashMap<String, Arc<Notifier>>>> = OnceLock::new();
    NOTIFIERS.get_or_init(Default::default)
}

/// Asks for a wake-up NOTIFY on `queue` after a committed autocommit enqueue.
pub(crate) fn poke(pool: &PgPool, queue: &str) {
    let opts = pool.connect_options();
    let key = format!(
        "{}@{}:{}/{}",
        opts.get_username(),
        opts.get_host(),
        opts.get_port(),
        opts.get_database().unwrap_or("")
    );
    let notifier = {
        let mut map = notifiers().lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key).or_default().clone()
    };
    {
        let mut work = notifier.work();
        work.pokes += 1;
        if !work.queues.iter().any(|q| q == queue) {
            work.queues.push(queue.to_owned());
        }
        work.pool.get_or_insert_with(|| pool.clone());
    }
    if notifier
        .running
        .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        let opts = opts.as_ref().clone().application_name(APP_NAME);
        tokio::spawn(send_while_poked(notifier, opts));
    } else {
        notifier.wake.notify_one();
    }
}

/// Clears `running` if the sender task is dropped mid-way (its runtime shut down),
/// so the next poke starts a new one.
struct Running {
    notifier: Arc<Notifier>,
    armed: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.armed {
            self.notifier.running.store(false, Ordering::SeqCst);
        }
    }
}

async fn send_while_poked(notifier: Arc<Notifier>, opts: PgConnectOptions) {
    let mut running = Running {
        notifier,
        armed: true,
    };
    let notifier = running.notifier.clone();
    let mut conn: Option<PgConnection> = None;
    let mut pacer = Pacer::new();
    loop {
        if notifier.has_work() {
            // Pokes that land while this waits are coalesced into the one NOTIFY.
            let wait = pacer.take(Instant::now());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let work = std::mem::take(&mut *notifier.work());
            pacer.sent(Instant::now(), work.pokes);
            send(&mut conn, &opts, work).await;
            continue;
        }
        if tokio::time::timeout(IDLE, notifier.wake.notified())
            .await
            .is_ok()
        {
            continue;
        }
        if let Some(c) = conn.take() {
            let _ = tokio::time::timeout(NOTIFY_TIMEOUT, c.close()).await;
        }
        notifier.running.store(false, Ordering::SeqCst);
        // A poke may have landed after the check above: take it over.
        if !(notifier.has_work()
            && notifier
                .running
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok())
        {
            // `running` now belongs to whichever task a later poke starts.
            running.armed = false;
            return;
        }
    }
}

/// One NOTIFY for `work.queues`: on the sender's connection, or through the pool
/// if that connection cannot be opened or fails (it is then dropped).
async fn send(conn: &mut Option<PgConnection>, opts: &PgConnectOptions, work: Work) {
    let sent = db::timed("queues_notify", NOTIFY_TIMEOUT, async {
        if conn.is_none() {
            *conn = Some(
                PgConnection::connect_with(opts)
                    .await
                    .map_err(db::err("notifier_connect"))?,
            );
        }
        let c = conn.as_mut().expect("connected above");
        db::enqueue::queues_notify(c, &work.queues).await
    })
    .await;
    let Err(e) = sent else { return };
    // Broken, or cut off mid-call by the timeout: never reuse it.
    *conn = None;
    tracing::debug!(error = %crate::chain(&e), "notifier connection failed; NOTIFY through the pool");
    let Some(pool) = work.pool else { return };
    let sent = db::timed(
        "queues_notify",
        NOTIFY_TIMEOUT,
        db::enqueue::queues_notify(&pool, &work.queues),
    )
    .await;
    if let Err(e) = sent {
        // Only a hint: workers poll anyway.
        tracing::debug!(error = %crate::chain(&e), "wake-up NOTIFY failed");
    }
}
