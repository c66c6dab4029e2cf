//! The `otel` feature: the enqueuing span's trace context rides in the job's
//! metadata; attempt 1 is a child of `lq.enqueue` (itself a child of the
//! caller's span), and attempt 2 starts a new trace linked to it. Its own test
//! binary: the subscriber is global to the process.

use std::time::Duration;

use lq_runtime::{testing, Job, JobContext, JobError, JobState, Perform, Runtime};
use lq_tests::TestDb;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde::{Deserialize, Serialize};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// Fails its first attempt, succeeds its second.
#[derive(Serialize, Deserialize, Job)]
#[job(kind = "otel.second_time", queue = "otel-q", backoff = fixed("10ms"))]
struct SecondTime;

impl Perform for SecondTime {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.attempt() == 1 {
            return Err("first attempt fails".into());
        }
        Ok(())
    }
}

fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one {name} span; spans: {:?}", names(spans));
    found[0]
}

fn names(spans: &[SpanData]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_ref()).collect()
}

fn attempt_of(span: &SpanData) -> i64 {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == "lq.attempt")
        .and_then(|kv| match &kv.value {
            opentelemetry::Value::I64(n) => Some(*n),
            _ => None,
        })
        .expect("lq.attempt attribute")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_one_continues_the_enqueuers_trace_and_a_retry_links_to_it() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("lq-test")));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let db = TestDb::new().await;
    let request = tracing::info_span!("request");
    let id = SecondTime
        .enqueue(&db.pool)
        .instrument(request.clone())
        .await
        .unwrap()
        .id;
    drop(request);
    let runtime = Runtime::builder(db.pool.clone())
        .queue("otel-q", 2)
        .poll_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    testing::wait_for_job(&db.pool, id, JobState::Succeeded, Duration::from_secs(30))
        .await
        .unwrap();
    runtime.shutdown().await.unwrap();
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let request = one(&spans, "request");
    let enqueue = one(&spans, "lq.enqueue");
    let mut jobs: Vec<&SpanData> = spans.iter().filter(|s| s.name == "lq.job").collect();
    jobs.sort_by_key(|s| attempt_of(s));
    assert_eq!(jobs.len(), 2, "two attempts; spans: {:?}", names(&spans));
    let trace = request.span_context.trace_id();

    assert_eq!(enqueue.span_context.trace_id(), trace);
    assert_eq!(enqueue.parent_span_id, request.span_context.span_id());
    assert_eq!(
        jobs[0].span_context.trace_id(),
        trace,
        "attempt 1 is in the request's trace"
    );
    assert_eq!(jobs[0].parent_span_id, enqueue.span_context.span_id());
    assert_ne!(
        jobs[1].span_context.trace_id(),
        trace,
        "a retry starts a trace of its own"
    );
    let linked: Vec<_> = jobs[1]
        .links
        .links
        .iter()
        .map(|l| l.span_context.span_id())
        .collect();
    assert_eq!(
        linked,
        vec![enqueue.span_context.span_id()],
        "and links to the enqueue"
    );
    let meta = lq_runtime::control::get(&db.pool, id)
        .await
        .unwrap()
        .meta_value()
        .unwrap()
        .unwrap();
    assert!(
        meta["traceparent"].as_str().unwrap().starts_with("00-"),
        "{meta}"
    );
}
