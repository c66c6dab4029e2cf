//! A worker that exports Prometheus metrics on http://127.0.0.1:9464/metrics
//! while it runs a steady trickle of jobs (some fail, some retry, a few go dead),
//! so a Prometheus and the Grafana dashboard in `docs/observability/` have
//! something to show. Metrics need lq-runtime's `metrics` feature.
//!
//! `cargo run -p lq-examples --bin prometheus` (then `curl 127.0.0.1:9464/metrics`);
//! `LQ_METRICS_ADDR` changes the address, `LQ_RUN_FOR=30s` stops it after a while.

use std::{net::SocketAddr, time::Duration};

use lq_runtime::{Job, JobContext, JobError, Perform, Runtime};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use serde::{Deserialize, Serialize};

/// Takes a few milliseconds; fails one time in ten, and is dead after 3 tries.
#[derive(Serialize, Deserialize, Job)]
#[job(queue = "emails", max_attempts = 3, backoff = fixed("1s"))]
struct SendEmail {
    n: u64,
}

impl Perform for SendEmail {
    async fn perform(&self, _ctx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(2 + self.n % 5)).await;
        if self.n.is_multiple_of(10) {
            return Err(format!("smtp refused message {}", self.n).into());
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lq_examples::init_logging();
    let addr: SocketAddr = std::env::var("LQ_METRICS_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:9464".into())
        .parse()?;
    // Durations as Prometheus histograms with litequeue's own bucket bounds
    // (the job histograms are recorded per bucket), so dashboards can take
    // quantiles across runtimes; the batch sizes stay summaries.
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            Matcher::Suffix("_seconds".into()),
            &lq_runtime::control::WAIT_BUCKET_BOUNDS,
        )?
        .install()?;
    let pool = lq_examples::fresh_database("lq_example_prometheus").await?;
    let runtime = Runtime::builder(pool.clone())
        .queue("emails", 16)
        .start()
        .await?;
    println!("metrics on http://{addr}/metrics; Ctrl-C to stop");
    let run_for = std::env::var("LQ_RUN_FOR")
        .ok()
        .map(|s| humantime::parse_duration(&s))
        .transpose()?;
    let producer = tokio::spawn(async move {
        let mut n = 0u64;
        loop {
            let batch = (0..50).map(|_| {
                n += 1;
                SendEmail { n }
            });
            SendEmail::enqueue_many(&pool, batch, Default::default()).await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        #[allow(unreachable_code)]
        Ok::<_, lq_runtime::CoreError>(())
    });
    match run_for {
        Some(d) => tokio::time::sleep(d).await,
        None => tokio::signal::ctrl_c().await?,
    }
    producer.abort();
    runtime.shutdown().await?;
    Ok(())
}
