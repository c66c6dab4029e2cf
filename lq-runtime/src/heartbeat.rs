//! The heartbeat: extends the leases this runtime holds, on its own connection, so
//! a starved application pool cannot cost a lease.

use std::{collections::HashSet, sync::Arc, time::Duration};

use lq_core::{chain, db, Error};
use sqlx::PgConnection;
use tracing::warn;
use uuid::Uuid;

use crate::{
    inflight::{Held, Inflight},
    shared::Shared,
};

/// How often leases are renewed: a quarter of the shortest lease, at least 100 ms.
pub(crate) fn interval(lease_secs: &[f64]) -> Duration {
    let shortest = lease_secs.iter().copied().fold(f64::INFINITY, f64::min);
    let shortest = if shortest.is_finite() { shortest } else { 60.0 };
    Duration::from_secs_f64((shortest / 4.0).max(0.1))
}

/// Renews leases until `stop` fires (after every job task has finished).
pub(crate) async fn run(shared: Arc<Shared>, stop: tokio_util::sync::CancellationToken) {
    let every = interval(&shared.lease_secs);
    let mut conn: Option<PgConnection> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        if let Err(e) = beat(&shared, &mut conn).await {
            conn = None; // reconnect next time
            warn!(error = %chain(&e), "heartbeat failed; leases are renewed at the next beat");
        }
    }
}

async fn beat(shared: &Shared, conn: &mut Option<PgConnection>) -> Result<(), Error> {
    let held = shared.inflight.snapshot();
    if held.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = held.iter().map(|(id, _)| *id).collect();
    let tokens: Vec<_> = held.iter().map(|(_, h)| h.token).collect();
    let secs: Vec<f64> = held.iter().map(|(_, h)| h.lease_secs).collect();
    let timeout = shared.config.db_timeout;
    let c = shared.own_connection(conn, "heartbeat_connect").await?;
    let renewed = db::timed(
        "job_heartbeat_many",
        timeout,
        db::lease::job_heartbeat_many(c, &ids, &tokens, &secs),
    )
    .await?;
    // Renewed under the snapshot's token: signal that attempt, not a newer one.
    for r in renewed.iter().filter(|r| r.cancel_requested) {
        if let Some((_, h)) = held.iter().find(|(id, _)| *id == r.id) {
            shared.inflight.cancel_if_held(r.id, h.token);
        }
    }
    let renewed: HashSet<i64> = renewed.iter().map(|r| r.id).collect();
    let unrenewed = not_renewed(&shared.inflight, &held, &renewed);
    if unrenewed.is_empty() {
        return Ok(());
    }
    // Skipped as locked elsewhere, or lost: a statement of its own (a newer
    // snapshot than the heartbeat's) tells which.
    let (ids, tokens): (Vec<i64>, Vec<Uuid>) = unrenewed.iter().copied().unzip();
    let c = shared.own_connection(conn, "heartbeat_connect").await?;
    let still_held = db::timed(
        "job_leases_still_held",
        timeout,
        db::lease::job_leases_still_held(c, &ids, &tokens),
    )
    .await?;
    for (id, token) in unrenewed {
        if still_held.contains(&id) {
            warn!(
                id,
                "lease not renewed: another session holds the job's row locked; retried at the next beat"
            );
        } else {
            warn!(
                id,
                "lease lost: the job's handler is told to stop and its writes will be refused"
            );
            shared.inflight.cancel_if_held(id, token);
        }
    }
    Ok(())
}

/// The leases of `held` that the beat did not renew and for which nothing is
/// being written: lost, or skipped as locked elsewhere. A job whose handler
/// returned, or that is being handed back to the queue, may have had that
/// written between the snapshot and the beat (and a hand-back's job claimed by
/// another worker since): that is no loss, and a real loss is reported by the
/// writer.
fn not_renewed(
    inflight: &Inflight,
    held: &[(i64, Held)],
    renewed: &HashSet<i64>,
) -> Vec<(i64, Uuid)> {
    held.iter()
        .filter(|(id, h)| !renewed.contains(id) && inflight.unwritten(*id, h.token))
        .map(|(id, h)| (*id, h.token))
        .collect()
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::CancellationToken;

    use super::*;

    fn hold(inflight: &Inflight, id: i64) -> (i64, Held) {
        let held = Held {
            token: Uuid::new_v4(),
            lease_secs: 30.0,
            cancel: CancellationToken::new(),
            writing: false,
        };
        inflight.insert(id, held.clone());
        (id, held)
    }

    #[test]
    fn only_running_handlers_whose_lease_was_not_renewed_are_in_question() {
        let inflight = Inflight::default();
        let held = vec![
            hold(&inflight, 1), // renewed
            hold(&inflight, 2), // not renewed, handler running: lost
            hold(&inflight, 3), // not renewed, outcome or hand-back being written: not lost
            hold(&inflight, 4), // not renewed, outcome written and gone: not lost
        ];
        inflight.set_writing(3, held[2].1.token, true);
        inflight.remove(4, held[3].1.token);
        let renewed = HashSet::from([1]);
        assert_eq!(
            not_renewed(&inflight, &held, &renewed),
            vec![(2, held[1].1.token)]
        );
    }

    #[test]
    fn a_lease_taken_over_by_a_new_claim_is_not_the_old_ones() {
        let inflight = Inflight::default();
        let old = hold(&inflight, 1);
        // The same job, claimed again by this runtime under a new token.
        let _new = hold(&inflight, 1);
        assert!(not_renewed(&inflight, &[old], &HashSet::new()).is_empty());
    }
}
