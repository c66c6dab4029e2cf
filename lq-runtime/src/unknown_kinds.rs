//! Buries jobs of kinds no live runtime serving their queue declares (can run:
//! a kind linked without a `Perform` is not declared), so they
//! end in a visible state (`dead`, reason stored, payload kept) instead of
//! waiting forever. Only the leader runs it, and it judges by `lq.runtimes`, not
//! by its own registry: during a rolling deploy the new kind's jobs wait for the
//! new runtimes instead of being buried by the old ones.

use std::{sync::Arc, time::Duration};

use lq_core::{chain, db};
use tracing::{warn, Instrument};

use crate::shared::Shared;

/// How often the check runs: every `rescue_interval`, or every tenth of the
/// grace when that is longer (at most a minute). The check reads every queued
/// job (no index leads with the kind), about 0.2 s of a core per 500k, so with
/// the default grace of 10 min it runs every minute rather than every 5 s; a
/// job is buried at most a tenth of the grace late.
pub(crate) fn every(rescue_interval: Duration, grace: Duration) -> Duration {
    rescue_interval.max((grace / 10).min(Duration::from_secs(60)))
}

/// Checks every [`every`] for queued jobs, in queues some live runtime serves,
/// of kinds none of those runtimes declares, ready for longer than `grace`.
pub(crate) async fn run(shared: Arc<Shared>, grace: Duration) {
    let every = every(shared.config.rescue_interval, grace);
    loop {
        if shared.pause(every).await {
            return;
        }
        if !shared.is_leader() {
            continue;
        }
        let r = shared
            .with_conn("job_bury_unknown_kinds", |mut conn| async move {
                db::maintenance::job_bury_unknown_kinds(&mut conn, grace.as_secs_f64(), 1000).await
            })
            .instrument(crate::telemetry::duty_span("bury"))
            .await;
        match r {
            Ok(ids) if !ids.is_empty() => {
                crate::telemetry::maintenance("buried", ids.len() as u64);
                warn!(
                    ?ids,
                    "marked dead: jobs of a kind no live runtime serving their queue declares"
                )
            }
            Ok(_) => {}
            Err(e) => warn!(error = %chain(&e), "unknown-kind check failed; will retry"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_runs_every_tenth_of_the_grace_between_the_rescue_interval_and_a_minute() {
        let secs = Duration::from_secs;
        assert_eq!(every(secs(5), secs(600)), secs(60));
        assert_eq!(every(secs(5), secs(120)), secs(12));
        assert_eq!(every(secs(5), secs(10)), secs(5));
        assert_eq!(every(secs(5), secs(86_400)), secs(60));
        assert_eq!(
            every(Duration::from_millis(50), Duration::ZERO),
            Duration::from_millis(50)
        );
    }
}
