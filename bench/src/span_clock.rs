//! When a tracing span began, kept in the span's extensions: the bench's span
//! timers (the curves' claim latency, the drain's `LQ_BENCH_BUSY` diagnosis)
//! share it.

use std::time::Instant;

use tracing::{span, Subscriber};
use tracing_subscriber::{layer::Context, registry::LookupSpan};

/// The instant a span was created.
struct Began(Instant);

/// Records now as the creation time of span `id` (call it from `on_new_span`).
pub fn stamp<S>(id: &span::Id, ctx: &Context<'_, S>)
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    if let Some(span) = ctx.span(id) {
        span.extensions_mut().insert(Began(Instant::now()));
    }
}

/// When span `id` was created, if [`stamp`] saw it.
pub fn began<S>(id: &span::Id, ctx: &Context<'_, S>) -> Option<Instant>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let span = ctx.span(id)?;
    let began = span.extensions().get::<Began>().map(|b| b.0);
    began
}
