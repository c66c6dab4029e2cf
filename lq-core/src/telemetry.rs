//! What the producer side reports: the `lq.enqueue` span, the enqueue counter
//! (`metrics` feature) and the trace context a job carries to its attempts
//! (`otel` feature). With the features off these are a span and nothing else.

use serde_json::{Map, Value};
use tracing::{field::Empty, Span};

/// The span around one enqueue (or one bulk enqueue): OpenTelemetry's messaging
/// conventions where they fit (`messaging.*`), litequeue's own fields under `lq.*`.
pub(crate) fn enqueue_span(kind: &'static str, queue: &str) -> Span {
    tracing::info_span!(
        "lq.enqueue",
        otel.kind = "producer",
        messaging.system = "litequeue",
        "messaging.operation.type" = "send",
        messaging.destination.name = queue,
        messaging.message.id = Empty,
        messaging.batch.message_count = Empty,
        lq.kind = kind,
        lq.unique_hit = Empty,
    )
}

/// Records an enqueue that the database accepted: `count` jobs inserted from
/// `first_id` on, or (`existing`) a live job that already held the unique key.
pub(crate) fn enqueued(
    span: &Span,
    kind: &'static str,
    queue: &str,
    first_id: i64,
    existing: bool,
    count: u64,
) {
    span.record("messaging.message.id", first_id);
    span.record("lq.unique_hit", existing);
    if count > 1 {
        span.record("messaging.batch.message_count", count);
    }
    #[cfg(feature = "metrics")]
    if !existing {
        metrics::counter!("lq_jobs_enqueued_total", "queue" => queue.to_owned(), "kind" => kind)
            .increment(count);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, queue);
}

/// Adds the current span's trace context to a job's metadata as W3C
/// `traceparent`/`tracestate` (`otel` feature), so its first attempt joins the
/// enqueuer's trace. Without the feature, or without an active trace, nothing.
pub(crate) fn inject_trace_context(meta: &mut Map<String, Value>) {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::propagation::TextMapPropagator;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let cx = Span::current().context();
        let mut carrier = std::collections::HashMap::new();
        opentelemetry_sdk::propagation::TraceContextPropagator::new()
            .inject_context(&cx, &mut carrier);
        for (k, v) in carrier {
            meta.insert(k, Value::String(v));
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = meta;
}
