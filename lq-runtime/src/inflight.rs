//! The jobs this runtime holds leases on: running, or waiting for their outcome to be written.

use std::{collections::HashMap, sync::Mutex};

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// One held lease.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub token: Uuid,
    pub lease_secs: f64,
    pub cancel: CancellationToken,
    /// The handler returned and its outcome is being written; that write reports a
    /// lost lease itself, so the heartbeat stays silent about it.
    pub handler_returned: bool,
}

/// Shared map from job id to its lease, read by the heartbeat and the cancel listener.
/// Every job goes in and out once, so it is hashed with foldhash rather than the
/// standard SipHash: the map's upkeep was 4 % of the runtime's CPU in a drain.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    jobs: Mutex<HashMap<i64, Held, foldhash::fast::RandomState>>,
}

impl Inflight {
    pub fn insert(&self, id: i64, held: Held) {
        self.lock().insert(id, held);
    }

    pub fn remove(&self, id: i64) {
        self.lock().remove(&id);
    }

    /// Removes a written batch's jobs under one lock.
    pub fn remove_all(&self, ids: &[i64]) {
        let mut jobs = self.lock();
        for id in ids {
            jobs.remove(id);
        }
    }

    /// Fires the cancellation signal of job `id` if this runtime runs it.
    pub fn cancel(&self, id: i64) -> bool {
        match self.lock().get(&id) {
            Some(h) => {
                h.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// The lease token this runtime holds for job `id`, if any.
    pub fn token(&self, id: i64) -> Option<Uuid> {
        self.lock().get(&id).map(|h| h.token)
    }

    /// Fires the signal of `id` only if it still holds the lease `token`.
    pub fn cancel_if_held(&self, id: i64, token: Uuid) {
        if let Some(h) = self.lock().get(&id) {
            if h.token == token {
                h.cancel.cancel();
            }
        }
    }

    /// Marks job `id`'s handler as returned (see [`Held::handler_returned`]).
    pub fn handler_returned(&self, id: i64) {
        if let Some(h) = self.lock().get_mut(&id) {
            h.handler_returned = true;
        }
    }

    /// True when job `id` still holds lease `token` and its handler has not returned.
    pub fn handler_running(&self, id: i64, token: Uuid) -> bool {
        self.lock()
            .get(&id)
            .is_some_and(|h| h.token == token && !h.handler_returned)
    }

    /// A copy of every held lease.
    pub fn snapshot(&self) -> Vec<(i64, Held)> {
        self.lock().iter().map(|(id, h)| (*id, h.clone())).collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Held, foldhash::fast::RandomState>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}
