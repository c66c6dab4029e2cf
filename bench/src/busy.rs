//! For a diagnosis only (`LQ_BENCH_BUSY=1`): when the runtime had statements in
//! flight during a drain. Records the `lq.claim` and `lq.complete_flush` spans
//! (creation to close) and reports, for the drain, the share of its time with
//! none, one, two or more of them out, and each kind's own busy share.
//!
//! These are the runtime's view, not the server's: a claim's span runs from
//! before it takes its connection until its jobs are spawned, a write's around
//! its statement (and any retry). `bench/FINDINGS.md` ("Stop 64") reads them.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering::Relaxed},
        Mutex,
    },
    time::Instant,
};

use tracing::{span, subscriber::Interest, Metadata, Subscriber};
use tracing_subscriber::{
    filter::{dynamic_filter_fn, LevelFilter},
    layer::Context,
    registry::LookupSpan,
    Layer,
};

const SPANS: [&str; 2] = ["lq.claim", "lq.complete_flush"];
static ON: AtomicBool = AtomicBool::new(false);
static SEEN: Mutex<Vec<(usize, Instant, Instant)>> = Mutex::new(Vec::new());

/// The layer: it sees the two spans only, and only with `LQ_BENCH_BUSY` set.
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let wanted = wanted();
    let filter = dynamic_filter_fn(|meta: &Metadata<'_>, _: &Context<'_, S>| {
        ON.load(Relaxed) && SPANS.contains(&meta.name())
    })
    .with_max_level_hint(LevelFilter::DEBUG)
    .with_callsite_filter(move |meta| {
        if wanted && meta.is_span() && SPANS.contains(&meta.name()) {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    });
    Busy.with_filter(filter)
}

/// Starts recording a drain's spans, dropping any recorded before.
pub fn start() {
    SEEN.lock().unwrap().clear();
    ON.store(wanted(), Relaxed);
}

/// Whether `LQ_BENCH_BUSY` asks for the diagnosis.
fn wanted() -> bool {
    std::env::var_os("LQ_BENCH_BUSY").is_some()
}

/// Prints the summary of the spans closed since [`start`], over `[t0, t1]`.
pub fn report(t0: Instant, t1: Instant) {
    if !ON.swap(false, Relaxed) {
        return;
    }
    let seen = std::mem::take(&mut *SEEN.lock().unwrap());
    let wall = (t1 - t0).as_secs_f64();
    let mut edges: Vec<(Instant, i32, usize)> = Vec::new();
    let mut own = [0.0f64; 2];
    let mut count = [0usize; 2];
    for &(kind, a, b) in &seen {
        own[kind] += (b - a).as_secs_f64();
        count[kind] += 1;
        edges.push((a, 1, kind));
        edges.push((b, -1, kind));
    }
    edges.sort_by_key(|e| (e.0, e.1));
    let mut depth = [0i32; 2];
    let mut by_depth = [0.0f64; 4];
    let mut claim_union = 0.0;
    let mut last = t0;
    for (at, d, kind) in edges {
        let at = at.clamp(t0, t1);
        let span = (at - last).as_secs_f64();
        let total = (depth[0] + depth[1]).clamp(0, 3) as usize;
        by_depth[total] += span;
        if depth[0] > 0 {
            claim_union += span;
        }
        depth[kind] += d;
        last = at;
    }
    by_depth[0] += (t1 - last.max(t0)).as_secs_f64();
    println!(
        "    busy: {} claims ({:.1} ms each, {:.0} % of the drain with one or more out), {} writes ({:.1} ms each, {:.0} % busy); statements out: none {:.0} %, one {:.0} %, two {:.0} %, three or more {:.0} %",
        count[0],
        own[0] * 1e3 / count[0].max(1) as f64,
        claim_union * 100.0 / wall,
        count[1],
        own[1] * 1e3 / count[1].max(1) as f64,
        own[1] * 100.0 / wall,
        by_depth[0] * 100.0 / wall,
        by_depth[1] * 100.0 / wall,
        by_depth[2] * 100.0 / wall,
        by_depth[3] * 100.0 / wall,
    );
}

struct Busy;

impl<S> Layer<S> for Busy
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, _: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        crate::span_clock::stamp(id, &ctx);
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        let (Some(span), Some(began)) = (ctx.span(&id), crate::span_clock::began(&id, &ctx)) else {
            return;
        };
        let kind = usize::from(span.name() == SPANS[1]);
        SEEN.lock().unwrap().push((kind, began, Instant::now()));
    }
}
