//! Claim latency as the runtime sees it: the time from the creation of each
//! `lq.claim` span (right before the claimer takes its connection and sends the
//! claim statement) to the runtime recording `lq.claimed` on it (right after the
//! statement returned). That is the interval the runtime's own
//! `lq_claim_duration_seconds` histogram covers (`metrics` feature); a tracing
//! layer reads it without building the bench with that feature. Claims that
//! failed record no `lq.claimed` and are not counted.

use std::sync::{
    atomic::{AtomicBool, Ordering::Relaxed},
    Mutex,
};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tracing::{
    field::{Field, Visit},
    span,
    subscriber::Interest,
    Metadata, Subscriber,
};
use tracing_subscriber::{
    filter::{dynamic_filter_fn, LevelFilter},
    layer::Context,
    registry::LookupSpan,
    Layer,
};

use crate::{span_clock, stats::percentile};

/// The span lq-runtime opens around each claim statement (`telemetry::claim_span`).
const CLAIM_SPAN: &str = "lq.claim";
/// The field it records, once, with the number of jobs the claim returned.
const CLAIMED_FIELD: &str = "lq.claimed";

/// Whether claims are recorded now: off outside the curves, so no other
/// scenario pays for the (debug-level) claim spans.
static ON: AtomicBool = AtomicBool::new(false);
static SAMPLES: Mutex<Vec<Sample>> = Mutex::new(Vec::new());

/// One claim: its duration in microseconds and how many jobs it returned.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Sample(pub u32, pub u32);

/// The layer, filtered so that it sees `lq.claim` spans only, and only while on.
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let filter = dynamic_filter_fn(|meta: &Metadata<'_>, _: &Context<'_, S>| {
        ON.load(Relaxed) && meta.name() == CLAIM_SPAN
    })
    .with_max_level_hint(LevelFilter::DEBUG)
    .with_callsite_filter(|meta| {
        if meta.is_span() && meta.name() == CLAIM_SPAN {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    });
    ClaimTimer.with_filter(filter)
}

/// Starts recording claims, dropping any recorded before.
pub fn start() {
    lock().clear();
    ON.store(true, Relaxed);
}

/// Stops recording and takes every claim recorded since [`start`].
pub fn stop() -> Vec<Sample> {
    ON.store(false, Relaxed);
    std::mem::take(&mut *lock())
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Sample>> {
    SAMPLES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Times `lq.claim` spans from creation to their `lq.claimed` record.
struct ClaimTimer;

impl<S> Layer<S> for ClaimTimer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, _: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        span_clock::stamp(id, &ctx);
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        let mut claimed = Claimed(None);
        values.record(&mut claimed);
        let (Some(got), Some(began)) = (claimed.0, span_clock::began(id, &ctx)) else {
            return;
        };
        let us = began.elapsed().as_micros().min(u32::MAX as u128) as u32;
        lock().push(Sample(us, got.min(u32::MAX as u64) as u32));
    }
}

/// Reads the `lq.claimed` value out of a span record.
struct Claimed(Option<u64>);

impl Visit for Claimed {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == CLAIMED_FIELD {
            self.0 = Some(value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == CLAIMED_FIELD {
            self.0 = Some(value.max(0) as u64);
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

/// Claim latency of one curve point: p50 and p99 over every claim recorded.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub claims: usize,
    /// Claims that found nothing (polls of an empty queue, the drain's tail).
    pub empty: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl Latency {
    /// Summarises `samples` (from one process or merged from several).
    pub fn of(samples: &[Sample]) -> Latency {
        let mut ms: Vec<f64> = samples.iter().map(|s| f64::from(s.0) / 1e3).collect();
        ms.sort_by(f64::total_cmp);
        Latency {
            claims: samples.len(),
            empty: samples.iter().filter(|s| s.1 == 0).count(),
            p50_ms: percentile(&ms, 50.0),
            p99_ms: percentile(&ms, 99.0),
        }
    }

    /// `claim p50 0.52 / p99 3.10 ms`
    pub fn show(&self) -> String {
        if self.claims == 0 {
            return "no claims".into();
        }
        format!("claim p50 {:.2} / p99 {:.2} ms", self.p50_ms, self.p99_ms)
    }

    pub fn json(&self) -> Value {
        json!({ "claims": self.claims, "empty_claims": self.empty,
                "p50_ms": self.p50_ms, "p99_ms": self.p99_ms })
    }
}
