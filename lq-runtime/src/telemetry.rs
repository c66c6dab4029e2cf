//! What a runtime reports beyond its logs: spans with stable names
//! (`lq.claim`, `lq.job`, `lq.complete_flush`, one per maintenance duty) and,
//! under the `metrics` feature, metrics through the `metrics` facade. Labels
//! are queue, kind and outcome only, never a job id. With the feature off,
//! every function here is empty and the compiler removes the calls.
//!
//! Trace context (`otel` feature): a job's metadata carries the enqueuing span's
//! `traceparent`; its first attempt's `lq.job` span is that span's child, and a
//! later attempt starts a new trace with a link to it (a retry hours later is
//! not part of the request that enqueued it).

use lq_core::db::claim::ClaimedJob;
use tracing::{field::Empty, Span};

/// The span of one attempt (`lq.job`), following OpenTelemetry's messaging
/// conventions where they fit. `lq.outcome` is recorded when it ends.
pub(crate) fn job_span(job: &ClaimedJob, queue: &str) -> Span {
    let wait = (job.started_at - job.run_at)
        .num_microseconds()
        .unwrap_or(0) as f64
        / 1e6;
    let span = tracing::info_span!(
        "lq.job",
        otel.kind = "consumer",
        messaging.system = "litequeue",
        "messaging.operation.type" = "process",
        messaging.destination.name = queue,
        messaging.message.id = job.id,
        lq.kind = %job.kind,
        lq.attempt = job.attempts,
        lq.wait_seconds = wait.max(0.0),
        lq.outcome = Empty,
    );
    #[cfg(feature = "otel")]
    link_trace(&span, job);
    span
}

/// Makes attempt 1 a child of the enqueuing span, and links later attempts to it.
#[cfg(feature = "otel")]
fn link_trace(span: &Span, job: &ClaimedJob) {
    use opentelemetry::{propagation::TextMapPropagator, trace::TraceContextExt};
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let Some(meta) = job.meta.as_deref() else {
        return;
    };
    let Ok(serde_json::Value::Object(meta)) = serde_json::from_str::<serde_json::Value>(meta)
    else {
        return;
    };
    let carrier: std::collections::HashMap<String, String> = ["traceparent", "tracestate"]
        .iter()
        .filter_map(|k| Some((k.to_string(), meta.get(*k)?.as_str()?.to_owned())))
        .collect();
    if carrier.is_empty() {
        return;
    }
    let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
    let remote = cx.span().span_context().clone();
    if !remote.is_valid() {
        return;
    }
    if job.attempts <= 1 {
        let _ = span.set_parent(cx);
    } else {
        span.add_link(remote);
    }
}

/// The span of one claim statement (debug level: it runs constantly).
pub(crate) fn claim_span(queue: &str, limit: usize) -> Span {
    tracing::debug_span!(
        "lq.claim",
        messaging.destination.name = queue,
        lq.limit = limit,
        lq.claimed = Empty
    )
}

/// The span of one batched success write (debug level).
pub(crate) fn flush_span(jobs: usize) -> Span {
    tracing::debug_span!("lq.complete_flush", messaging.batch.message_count = jobs)
}

/// The span of one run of a maintenance duty (`lq.rescue`, `lq.prune`, ...).
pub(crate) fn duty_span(name: &'static str) -> Span {
    match name {
        "rescue" => tracing::debug_span!("lq.rescue"),
        "prune" => tracing::debug_span!("lq.prune"),
        "vacuum" => tracing::debug_span!("lq.vacuum"),
        "cron" => tracing::debug_span!("lq.cron"),
        "bury" => tracing::debug_span!("lq.bury"),
        "rollup" => tracing::debug_span!("lq.rollup"),
        "gauges" => tracing::debug_span!("lq.gauges"),
        _ => tracing::debug_span!("lq.duty", lq.duty = name),
    }
}

/// The claim metrics of one queue (`metrics` feature), registered once when its
/// claimer starts, so a claim adds to handles instead of looking them up.
pub(crate) struct ClaimMetrics {
    #[cfg(feature = "metrics")]
    claims: metrics::Counter,
    #[cfg(feature = "metrics")]
    duration: metrics::Histogram,
    #[cfg(feature = "metrics")]
    claimed: metrics::Counter,
    #[cfg(feature = "metrics")]
    batch: metrics::Histogram,
}

impl ClaimMetrics {
    /// The handles for `queue`.
    pub(crate) fn new(queue: &str) -> Self {
        #[cfg(feature = "metrics")]
        {
            let q = || queue.to_owned();
            Self {
                claims: metrics::counter!("lq_claims_total", "queue" => q()),
                duration: metrics::histogram!("lq_claim_duration_seconds", "queue" => q()),
                claimed: metrics::counter!("lq_jobs_claimed_total", "queue" => q()),
                batch: metrics::histogram!("lq_claim_batch_size", "queue" => q()),
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = queue;
            Self {}
        }
    }

    /// A claim statement returned `got` jobs after `secs`.
    pub(crate) fn claimed(&self, got: usize, secs: f64) {
        #[cfg(feature = "metrics")]
        {
            self.claims.increment(1);
            self.duration.record(secs);
            if got > 0 {
                self.claimed.increment(got as u64);
                self.batch.record(got as f64);
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (got, secs);
    }
}

/// A claim of `queue` found every claim slot taken, and waited its turn or (a
/// second claim) claimed nothing (`lq_claims_throttled_total`): counted once per claim, as
/// `Stats::throttled_claims` is. A steady rate means more claims race for the
/// queue than its slots let through at once (many runtimes on one queue).
pub(crate) fn claim_throttled(queue: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("lq_claims_throttled_total", "queue" => queue.to_owned()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = queue;
}

/// The completer's metrics (`metrics` feature), registered once when it starts.
pub(crate) struct FlushMetrics {
    #[cfg(feature = "metrics")]
    flushes: metrics::Counter,
    #[cfg(feature = "metrics")]
    size: metrics::Histogram,
    #[cfg(feature = "metrics")]
    duration: metrics::Histogram,
}

impl FlushMetrics {
    /// The handles.
    pub(crate) fn new() -> Self {
        #[cfg(feature = "metrics")]
        {
            Self {
                flushes: metrics::counter!("lq_complete_flushes_total"),
                size: metrics::histogram!("lq_complete_flush_size"),
                duration: metrics::histogram!("lq_complete_flush_duration_seconds"),
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }

    /// One success write of `jobs` jobs took `secs`.
    pub(crate) fn flushed(&self, jobs: usize, secs: f64) {
        #[cfg(feature = "metrics")]
        {
            self.flushes.increment(1);
            self.size.record(jobs as f64);
            self.duration.record(secs);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (jobs, secs);
    }
}

/// A maintenance event: `what` is `rescued`, `pruned`, `buried`, `vacuums`,
/// `cron_ticks`, `notifies_received` or `idle_polls`; counted as `lq_{what}_total`.
pub(crate) fn maintenance(what: &'static str, n: u64) {
    #[cfg(feature = "metrics")]
    {
        let name = match what {
            "rescued" => "lq_rescued_total",
            "pruned" => "lq_pruned_total",
            "buried" => "lq_buried_total",
            "vacuums" => "lq_vacuums_total",
            "cron_ticks" => "lq_cron_ticks_total",
            "notifies_received" => "lq_notifies_received_total",
            "idle_polls" => "lq_idle_polls_total",
            _ => "lq_maintenance_events_total",
        };
        metrics::counter!(name).increment(n);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (what, n);
}

/// Whether this runtime leads now (`lq_leader`, 1 or 0, per runtime: the sum
/// over a cluster is 1 when all is well).
pub(crate) fn leader(leads: bool) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("lq_leader").set(if leads { 1.0 } else { 0.0 });
    #[cfg(not(feature = "metrics"))]
    let _ = leads;
}
