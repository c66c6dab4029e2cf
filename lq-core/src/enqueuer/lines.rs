//! The enqueuer's connections ("lines") and the calls waiting for one.
//!
//! A call that finds a line free runs its statement on it in the caller's own
//! task: no hand-off to another task and back, which cost a single producer about
//! a tenth of its rate (`bench/FINDINGS.md`, stop 36). A call that finds every
//! line busy waits in the queue; whoever gives a line back next takes everything
//! queued and sends it as one statement from a task of its own, so the caller
//! that gave the line back returns at once.
//!
//! Every queued call is served: calls are queued and lines given back under one
//! lock, and a call only queues while every line is taken, so some line will be
//! given back after it and will see it.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard, Weak},
    time::{Duration, Instant},
};

use sqlx::{postgres::PgConnectOptions, Connection, PgConnection, PgPool};
use tokio::{
    runtime::Handle,
    sync::{oneshot, Semaphore},
};

use super::{serve, Call, Done, Work};
use crate::Error;

/// A connection unused this long is closed (the next call opens one again).
const IDLE: Duration = Duration::from_secs(30);

/// Bound on closing a connection politely.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Calls that may wait for a line before `enqueue` itself waits.
const QUEUE_DEPTH: usize = 8_192;

/// Most jobs in one shared statement: the bulk insert's own batch size.
const MAX_SHARED_ROWS: usize = 1_000;

/// Most payload bytes in one shared statement, so a burst of large payloads is
/// split over several statements rather than sent as one huge one.
const MAX_SHARED_BYTES: usize = 4 << 20;

/// The lines of one enqueuer.
pub(super) struct Lines {
    state: Mutex<State>,
    /// Room in the queue: a call takes a permit before it queues, and the line
    /// that takes it out of the queue gives the permit back.
    room: Semaphore,
    most: usize,
    opts: PgConnectOptions,
    /// For the wake-up NOTIFY's fallback path (see `notify`).
    pool: PgPool,
}

struct State {
    idle: Vec<Parked>,
    /// Lines taken or idle, opened or about to be: never more than `most`.
    taken: usize,
    queue: VecDeque<Call>,
    /// Whether a task is closing idle connections as they pass [`IDLE`].
    reaping: bool,
}

/// A connection waiting for its next call.
struct Parked {
    conn: PgConnection,
    since: Instant,
    /// The tokio runtime whose I/O driver the connection's socket is registered
    /// with: a call on another runtime opens a connection of its own.
    runtime: Option<tokio::runtime::Id>,
}

/// One line, taken: the connection (opened on first use) and, while a statement
/// is out on it, the mark that it cannot be reused if the call is abandoned.
/// Dropping it gives the line back.
pub(super) struct Line {
    lines: Arc<Lines>,
    conn: Option<PgConnection>,
    busy: bool,
}

/// Where a call goes.
pub(super) enum Route {
    /// A free line: the caller sends its own statement.
    Direct(Line, Work),
    /// Every line is busy: the call waits in the queue for its answer.
    Queued(oneshot::Receiver<Result<Done, Error>>),
}

impl Lines {
    pub(super) fn new(most: usize, opts: PgConnectOptions, pool: PgPool) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                idle: Vec::new(),
                taken: 0,
                queue: VecDeque::new(),
                reaping: false,
            }),
            room: Semaphore::new(QUEUE_DEPTH),
            most: most.max(1),
            opts,
            pool,
        })
    }

    /// Lines taken or idle now.
    pub(super) fn open(&self) -> usize {
        self.lock().taken
    }

    /// The most lines this enqueuer keeps.
    pub(super) fn most(&self) -> usize {
        self.most
    }

    /// A free line for `work`, or `work` queued for the next line given back.
    pub(super) async fn route(self: &Arc<Self>, work: Work) -> Route {
        if let Some(line) = self.take(&mut self.lock()) {
            return Route::Direct(line, work);
        }
        let permit = self
            .room
            .acquire()
            .await
            .expect("the queue's room is never closed");
        let mut state = self.lock();
        if let Some(line) = self.take(&mut state) {
            return Route::Direct(line, work);
        }
        let (reply, answer) = oneshot::channel();
        state.queue.push_back(Call { work, reply });
        permit.forget();
        Route::Queued(answer)
    }

    /// An idle line of this runtime, or a new one if there is room.
    fn take(self: &Arc<Self>, state: &mut State) -> Option<Line> {
        let here = Handle::try_current().ok().map(|h| h.id());
        while let Some(parked) = state.idle.pop() {
            if parked.runtime == here {
                return Some(self.line(Some(parked.conn)));
            }
            // Its runtime is another one (perhaps gone): let it go.
            state.taken -= 1;
        }
        if state.taken < self.most {
            state.taken += 1;
            return Some(self.line(None));
        }
        None
    }

    fn line(self: &Arc<Self>, conn: Option<PgConnection>) -> Line {
        Line {
            lines: self.clone(),
            conn,
            busy: false,
        }
    }

    /// Gives a line back: its connection serves the queued calls, if any wait,
    /// from a task of its own; else it waits in the idle list. `None` (the
    /// connection lost) frees the line, or opens a new one for the queue.
    fn give_back(self: &Arc<Self>, conn: Option<PgConnection>) {
        let mut state = self.lock();
        if state.queue.is_empty() {
            let reaper = self.park(&mut state, conn);
            drop(state);
            if let Some(reaper) = reaper {
                reaper.start();
            }
            return;
        }
        let calls = self.next_calls(&mut state);
        drop(state);
        let line = self.line(conn);
        match Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(line.serve_queue(calls));
            }
            // No runtime to serve them on (it is shutting down): their callers
            // see the enqueuer stop, and the line goes back (to the calls queued
            // after them, which fare the same, or to the idle list).
            Err(_) => {
                drop(calls);
                drop(line);
            }
        }
    }

    /// Puts `conn` in the idle list (the state locked, the queue empty). Returns
    /// the reaper to start, once the lock is released, if none is running.
    #[must_use]
    fn park(self: &Arc<Self>, state: &mut State, conn: Option<PgConnection>) -> Option<Reaping> {
        let Some(conn) = conn else {
            state.taken -= 1;
            return None;
        };
        state.idle.push(Parked {
            conn,
            since: Instant::now(),
            runtime: Handle::try_current().ok().map(|h| h.id()),
        });
        if state.reaping {
            return None;
        }
        state.reaping = true;
        Some(Reaping(Arc::downgrade(self)))
    }

    /// Takes the next shared statement's calls off the queue: the first with every
    /// call behind it, up to the statement's bounds.
    fn next_calls(&self, state: &mut State) -> Vec<Call> {
        let mut calls = Vec::new();
        let mut bytes = 0;
        while calls.len() < MAX_SHARED_ROWS && bytes < MAX_SHARED_BYTES {
            let Some(call) = state.queue.pop_front() else {
                break;
            };
            bytes += call.payload_bytes();
            calls.push(call);
        }
        self.room.add_permits(calls.len());
        calls
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned lock still holds valid state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Line {
    /// The connection, opened if there is none; marked busy until
    /// [`Line::settled`], so an abandoned call's connection is not reused.
    pub(super) async fn conn(&mut self) -> Result<&mut PgConnection, Error> {
        self.busy = true;
        if self.conn.is_none() {
            let conn = PgConnection::connect_with(&self.lines.opts)
                .await
                .map_err(crate::db::err("enqueuer_connect"))?;
            self.conn = Some(conn);
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    /// The statement's answer arrived: the connection may serve another call.
    pub(super) fn settled(&mut self) {
        self.busy = false;
    }

    /// Drops the connection (lost, or its state unknown); the next call on this
    /// line opens another.
    pub(super) fn discard(&mut self) {
        self.conn = None;
        self.busy = false;
    }

    /// The pool for the wake-up NOTIFY's fallback path.
    pub(super) fn pool(&self) -> &PgPool {
        &self.lines.pool
    }

    /// Serves queued calls on this line, then gives it back (to the calls queued
    /// meanwhile, if any, in a task of their own).
    async fn serve_queue(self, calls: Vec<Call>) {
        let mut line = self;
        serve::calls(&mut line, calls).await;
        // The callers just answered were woken on this thread: let them run
        // first, so that their next calls, if they make any at once, are queued
        // by the time this line is given back.
        tokio::task::yield_now().await;
    }
}

impl Drop for Line {
    /// Gives the line back (a call done or abandoned). A connection with a
    /// statement still out is dropped, not reused.
    fn drop(&mut self) {
        let conn = self.conn.take().filter(|_| !self.busy);
        self.lines.clone().give_back(conn);
    }
}

/// The right to run the reaper: `reaping` is set while one exists, and cleared
/// when it is dropped (its task never ran, or was dropped with its runtime) unless
/// the reaper saw the idle list empty and cleared it itself.
struct Reaping(Weak<Lines>);

impl Reaping {
    /// Starts the reaper on the current runtime (without one, it is dropped).
    fn start(self) {
        if let Ok(runtime) = Handle::try_current() {
            runtime.spawn(reap(self));
        }
    }
}

impl Drop for Reaping {
    fn drop(&mut self) {
        if let Some(lines) = self.0.upgrade() {
            lines.lock().reaping = false;
        }
    }
}

/// Closes idle connections as they pass [`IDLE`]; ends when none is idle or the
/// enqueuer is gone.
async fn reap(mut reaping: Reaping) {
    let lines = reaping.0.clone();
    loop {
        let wait = {
            let Some(lines) = lines.upgrade() else { return };
            let mut state = lines.lock();
            match state.idle.iter().map(|p| p.since).min() {
                Some(oldest) => (oldest + IDLE).saturating_duration_since(Instant::now()),
                None => {
                    state.reaping = false;
                    reaping.0 = Weak::new();
                    return;
                }
            }
        };
        tokio::time::sleep(wait).await;
        let expired: Vec<Parked> = {
            let Some(lines) = lines.upgrade() else { return };
            let mut state = lines.lock();
            let now = Instant::now();
            let (expired, kept) = std::mem::take(&mut state.idle)
                .into_iter()
                .partition(|p| p.since + IDLE <= now);
            state.idle = kept;
            state.taken -= expired.len();
            expired
        };
        for parked in expired {
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, parked.conn.close()).await;
        }
    }
}

impl Drop for Lines {
    /// Closes the idle connections politely when a runtime is at hand.
    fn drop(&mut self) {
        let idle = std::mem::take(&mut self.lock().idle);
        if idle.is_empty() {
            return;
        }
        if let Ok(runtime) = Handle::try_current() {
            runtime.spawn(async move {
                for parked in idle {
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, parked.conn.close()).await;
                }
            });
        }
    }
}
