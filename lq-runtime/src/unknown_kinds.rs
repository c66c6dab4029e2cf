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

/// Checks every `rescue_interval` for queued jobs, in queues some live runtime
/// serves, of kinds none of those runtimes declares, ready for longer than `grace`.
pub(crate) async fn run(shared: Arc<Shared>, grace: Duration) {
    loop {
        if shared.pause(shared.config.rescue_interval).await {
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
