//! Buries jobs of kinds no linked type declares, so they end in a visible state
//! (`dead`, reason stored, payload kept) instead of waiting forever.

use std::{sync::Arc, time::Duration};

use lq_core::{chain, db};
use tracing::warn;

use crate::shared::Shared;

/// Checks every `rescue_interval` for queued jobs of unknown kinds in the served
/// queues that have been ready for longer than `grace`.
pub(crate) async fn run(shared: Arc<Shared>, grace: Duration) {
    let queues: Vec<String> = shared.wakers.keys().cloned().collect();
    let known: Vec<String> = shared.registry.iter().map(|d| d.kind.to_owned()).collect();
    loop {
        if shared.pause(shared.config.rescue_interval).await {
            return;
        }
        let r = shared
            .with_conn("job_bury_unknown_kinds", |mut conn| {
                let (queues, known) = (&queues, &known);
                async move {
                    db::maintenance::job_bury_unknown_kinds(
                        &mut conn,
                        queues,
                        known,
                        grace.as_secs_f64(),
                        1000,
                    )
                    .await
                }
            })
            .await;
        match r {
            Ok(ids) if !ids.is_empty() => {
                warn!(?ids, "marked dead: jobs of a kind no linked type declares")
            }
            Ok(_) => {}
            Err(e) => warn!(error = %chain(&e), "unknown-kind check failed; will retry"),
        }
    }
}
