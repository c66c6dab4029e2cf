//! Pool connections an enqueue keeps for a moment after it commits, so that the
//! next enqueue on the same pool skips the pool's acquire and release.
//!
//! sqlx pings every connection it takes back, and by default every one it hands
//! out, so a one-job enqueue on a pool cost two or three round trips where its
//! insert is one. An enqueue on a pool now keeps its connection for [`HOLD`]
//! after a statement that succeeded, and the next enqueue on that pool (on the
//! same tokio runtime) takes it back at once: a producer that enqueues again
//! within [`HOLD`] pays one round trip.
//!
//! A connection is kept only while the pool has another idle connection or room
//! to open one, so no other task waits for a held connection beyond a race at
//! the edge (bounded by [`HOLD`]); it goes back to the pool, through sqlx's own
//! release, after [`HOLD`] unused, when a statement on it fails, when it would
//! be one too many, and at the latest [`STREAK`] after it was first kept, so
//! that the pool's `max_lifetime` and release hooks still see a connection a
//! busy producer would otherwise keep for ever. The held connections belong to
//! a task on the caller's runtime, so they are dropped with that runtime, never
//! left open in a static.

use std::{
    collections::HashMap,
    ops::{Deref, DerefMut},
    sync::{Arc, Mutex, MutexGuard, OnceLock, Weak},
    time::Duration,
};

use sqlx::{pool::PoolConnection, PgConnection, PgPool, Postgres};
use tokio::{
    runtime::{Handle, Id},
    time::Instant,
};

/// How long a connection is kept without use: well above the gap between one
/// producer's enqueues, well below any pool's idle timeout, and short enough
/// that `PgPool::close` (which waits for every connection) hardly notices.
const HOLD: Duration = Duration::from_millis(20);

/// How long one connection may go from enqueue to enqueue without passing
/// through the pool's release.
const STREAK: Duration = Duration::from_secs(60);

/// Most connections kept per pool and runtime.
const MOST: usize = 8;

/// A connection of the pool, with when its current run of reuse began.
pub(crate) struct Conn {
    conn: PoolConnection<Postgres>,
    kept_since: Option<Instant>,
}

impl Deref for Conn {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

/// The connections kept for one pool on one runtime.
#[derive(Default)]
struct Shelf {
    state: Mutex<ShelfState>,
}

#[derive(Default)]
struct ShelfState {
    held: Vec<(Conn, Instant)>,
    /// Whether a task is returning connections as they pass [`HOLD`]; it owns
    /// the shelf while it runs.
    reaping: bool,
}

impl Shelf {
    fn state(&self) -> MutexGuard<'_, ShelfState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A pool (the address of its connect options, shared by its clones and alive
/// while any of its connections is) on a runtime.
type Key = (usize, Id);

fn shelves() -> &'static Mutex<HashMap<Key, Weak<Shelf>>> {
    static SHELVES: OnceLock<Mutex<HashMap<Key, Weak<Shelf>>>> = OnceLock::new();
    SHELVES.get_or_init(Default::default)
}

fn key(pool: &PgPool, runtime: Id) -> Key {
    (Arc::as_ptr(&pool.connect_options()) as usize, runtime)
}

/// A connection of `pool`: the one an enqueue on this runtime kept, else the
/// pool's own acquire.
pub(crate) async fn acquire(pool: &PgPool) -> Result<Conn, sqlx::Error> {
    if let Some(conn) = take(pool) {
        return Ok(conn);
    }
    Ok(Conn {
        conn: pool.acquire().await?,
        kept_since: None,
    })
}

/// The most recently kept connection of `pool`, if any.
fn take(pool: &PgPool) -> Option<Conn> {
    if pool.is_closed() {
        return None;
    }
    let runtime = Handle::try_current().ok()?.id();
    let shelf = shelves()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key(pool, runtime))?
        .upgrade()?;
    let mut state = shelf.state();
    state.held.pop().map(|(conn, _)| conn)
}

/// Keeps `conn`, whose statement just succeeded, for the next enqueue on `pool`;
/// or lets it go back to the pool at once when keeping it could make another
/// task wait.
pub(crate) fn keep(pool: &PgPool, mut conn: Conn) {
    let Ok(runtime) = Handle::try_current() else {
        return;
    };
    let now = Instant::now();
    let kept_since = *conn.kept_since.get_or_insert(now);
    let room = pool.num_idle() > 0 || pool.size() < pool.options().get_max_connections();
    if pool.is_closed() || !may_keep(room, kept_since, now) {
        return;
    }
    let shelf = {
        let mut map = shelves().lock().unwrap_or_else(|e| e.into_inner());
        let key = key(pool, runtime.id());
        match map.get(&key).and_then(Weak::upgrade) {
            Some(shelf) => shelf,
            None => {
                // Forget shelves whose runtime or last connection is gone.
                map.retain(|_, shelf| shelf.strong_count() > 0);
                let shelf = Arc::new(Shelf::default());
                map.insert(key, Arc::downgrade(&shelf));
                shelf
            }
        }
    };
    let start_reaper = {
        let mut state = shelf.state();
        if state.held.len() >= MOST {
            return;
        }
        state.held.push((conn, now));
        !std::mem::replace(&mut state.reaping, true)
    };
    if start_reaper {
        runtime.spawn(reap(shelf));
    }
}

/// Whether a connection may be kept at `now`: only while the pool has `room`
/// for another caller, and within [`STREAK`] of `kept_since`, when its run of
/// reuse began.
fn may_keep(room: bool, kept_since: Instant, now: Instant) -> bool {
    room && now.duration_since(kept_since) < STREAK
}

/// Returns each kept connection to its pool once it has been kept [`HOLD`]
/// unused, until none is left.
async fn reap(shelf: Arc<Shelf>) {
    loop {
        let now = Instant::now();
        let (expired, next) = {
            let mut state = shelf.state();
            let (expired, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut state.held)
                .into_iter()
                .partition(|(_, since)| *since + HOLD <= now);
            state.held = kept;
            let next = state.held.iter().map(|(_, since)| *since + HOLD).min();
            if next.is_none() {
                state.reaping = false;
            }
            (expired, next)
        };
        // Dropping a pool connection returns it through sqlx's release.
        drop(expired);
        match next {
            Some(at) => tokio::time::sleep_until(at).await,
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_kept_until_its_streak_is_a_minute_old() {
        let began = Instant::now();
        assert!(may_keep(true, began, began));
        assert!(may_keep(
            true,
            began,
            began + STREAK - Duration::from_millis(1)
        ));
        assert!(!may_keep(true, began, began + STREAK));
        assert!(!may_keep(true, began, began + 2 * STREAK));
        assert_eq!(STREAK, Duration::from_secs(60));
    }

    #[test]
    fn a_connection_is_never_kept_while_the_pool_has_no_room() {
        let began = Instant::now();
        assert!(!may_keep(false, began, began));
    }
}
