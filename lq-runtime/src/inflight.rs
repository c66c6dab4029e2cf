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
    /// The attempt's outcome, or its hand-back to the queue, is being written
    /// (its handler returned, or it never started): that write reports a lost
    /// lease itself, so the heartbeat stays silent about it.
    pub writing: bool,
}

/// Shared map from job id to its lease, read by the heartbeat and the cancel listener.
/// Every job goes in and out once, so it is hashed with foldhash rather than the
/// standard SipHash: the map's upkeep was 4 % of the runtime's CPU in a drain.
///
/// An entry belongs to one attempt, named by its lease token: after a lease
/// expires, this runtime may claim the same job again while the old attempt's
/// task still runs, and that task must neither remove nor mark the new attempt's
/// entry. Every change but [`Inflight::insert`] therefore names the token.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    jobs: Mutex<HashMap<i64, Held, foldhash::fast::RandomState>>,
}

impl Inflight {
    /// Holds job `id`'s new lease. An older attempt of the same job still held here
    /// lost its lease when the job was claimed again: its handler is told to stop.
    pub fn insert(&self, id: i64, held: Held) {
        let token = held.token;
        if let Some(old) = self.lock().insert(id, held) {
            if old.token != token {
                old.cancel.cancel();
            }
        }
    }

    /// Drops job `id`'s entry if it is still the attempt holding `token`.
    pub fn remove(&self, id: i64, token: Uuid) {
        self.remove_all(&[id], &[token]);
    }

    /// Drops the entries of a written batch (`ids[i]` with `tokens[i]`) under one
    /// lock, each only if it is still the attempt holding that token.
    pub fn remove_all(&self, ids: &[i64], tokens: &[Uuid]) {
        let mut jobs = self.lock();
        for (id, token) in ids.iter().zip(tokens) {
            if jobs.get(id).is_some_and(|h| h.token == *token) {
                jobs.remove(id);
            }
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

    /// Sets whether an outcome or hand-back of job `id`'s attempt holding `token`
    /// is being written (see [`Held::writing`]); returns what it was, so a write
    /// that changed nothing can put it back.
    pub fn set_writing(&self, id: i64, token: Uuid, writing: bool) -> bool {
        match self.lock().get_mut(&id) {
            Some(h) if h.token == token => std::mem::replace(&mut h.writing, writing),
            _ => false,
        }
    }

    /// True when job `id` still holds lease `token` and nothing is being written
    /// for it: a lease the heartbeat could not renew is then lost to it alone.
    pub fn unwritten(&self, id: i64, token: Uuid) -> bool {
        self.lock()
            .get(&id)
            .is_some_and(|h| h.token == token && !h.writing)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn held(token: Uuid) -> Held {
        Held {
            token,
            lease_secs: 30.0,
            cancel: CancellationToken::new(),
            writing: false,
        }
    }

    #[test]
    fn a_stale_attempt_neither_removes_nor_marks_the_job_claimed_again() {
        let inflight = Inflight::default();
        let (old, new) = (Uuid::new_v4(), Uuid::new_v4());
        let first = held(old);
        inflight.insert(7, first.clone());
        // The lease expired, the job was rescued, and this runtime claimed it again.
        inflight.insert(7, held(new));
        assert!(
            first.cancel.is_cancelled(),
            "the old attempt is told to stop"
        );
        // The old attempt's task ends: nothing of the new attempt changes.
        assert!(!inflight.set_writing(7, old, true), "not the held attempt");
        inflight.remove(7, old);
        inflight.remove_all(&[7], &[old]);
        assert_eq!(inflight.token(7), Some(new));
        assert!(inflight.unwritten(7, new));
        // A hand-back the server refused puts the mark back as it was.
        assert!(!inflight.set_writing(7, new, true));
        assert!(!inflight.unwritten(7, new));
        assert!(inflight.set_writing(7, new, false));
        assert!(inflight.unwritten(7, new));
        // The new attempt's own end removes it.
        inflight.set_writing(7, new, true);
        assert!(!inflight.unwritten(7, new));
        inflight.remove_all(&[7], &[new]);
        assert_eq!(inflight.len(), 0);
    }

    #[test]
    fn holding_the_same_attempt_again_does_not_cancel_it() {
        let inflight = Inflight::default();
        let token = Uuid::new_v4();
        let first = held(token);
        inflight.insert(3, first.clone());
        inflight.insert(3, held(token));
        assert!(!first.cancel.is_cancelled());
    }
}
