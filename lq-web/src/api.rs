//! What is not a page: `/health`, `/api/stats` (JSON) and the two assets.

use std::sync::Arc;

use axum::{
    extract::State,
    http::{header, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use lq_core::{
    control::{self, wait_quantile},
    JobFilter, JobState,
};
use serde_json::json;

use crate::{params::Pairs, Shared};

/// `GET /health`: `ok` while the server runs; with `?db=1` also after a round
/// trip to the database (503 when it does not answer). It answers without
/// authentication, so the cause goes to the log, not into the answer: a
/// driver's error can name hosts and roles.
pub(crate) async fn health(State(sh): State<Arc<Shared>>, uri: Uri) -> Response {
    if Pairs::from_query(&uri).get("db").is_none() {
        return text(StatusCode::OK, "ok".to_owned());
    }
    match control::oldest_transaction_age(&sh.pool).await {
        Ok(_) => text(StatusCode::OK, "ok".to_owned()),
        Err(e) => {
            tracing::warn!(error = %lq_core::chain(&e), "health check: the database did not answer");
            text(
                StatusCode::SERVICE_UNAVAILABLE,
                "database unavailable (the dashboard's log has the cause)".to_owned(),
            )
        }
    }
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// `GET /api/stats`: per queue the live counts, pause and oldest wait; dead
/// jobs per queue; and the last hour of the per-minute rollup. The counts are
/// the dashboard's, kept for one refresh period.
pub(crate) async fn stats(State(sh): State<Arc<Shared>>) -> Response {
    match stats_json(&sh).await {
        Ok(v) => ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response(),
        Err(e) => {
            let page = crate::error::PageError::from(e);
            (
                page.status,
                [(header::CONTENT_TYPE, "application/json")],
                json!({"error": page.message}).to_string(),
            )
                .into_response()
        }
    }
}

async fn stats_json(sh: &Shared) -> Result<serde_json::Value, lq_core::Error> {
    let queues = sh.counts.queues(&sh.pool).await?;
    let counts = sh
        .counts
        .count(
            &sh.pool,
            &JobFilter::new()
                .state(JobState::Queued)
                .state(JobState::Running),
        )
        .await?;
    let dead = sh
        .counts
        .count(&sh.pool, &JobFilter::new().state(JobState::Dead))
        .await?;
    let minutes = control::stats(&sh.pool, std::time::Duration::from_secs(3600)).await?;
    Ok(json!({
        "queues": queues.iter().map(|q| json!({
            "name": q.name,
            "paused": q.paused.is_some(),
            "available": q.available,
            "scheduled": q.scheduled,
            "running": q.running,
            "oldest_available_wait_secs": q.oldest_available_wait.map(|d| d.as_secs_f64()),
            "rate_limit": q.rate_limit.as_ref().map(|r| json!({
                "allowed": r.limit.allowed(), "period_secs": r.limit.period().as_secs_f64(),
                "tokens": r.tokens,
            })),
        })).collect::<Vec<_>>(),
        "counts": counts.iter().chain(&dead).map(|c| json!({
            "queue": c.queue, "state": c.state, "count": c.count,
        })).collect::<Vec<_>>(),
        "minutes": minutes.iter().map(|m| json!({
            "minute": m.minute, "queue": m.queue, "kind": m.kind,
            "succeeded": m.succeeded, "retried": m.retried, "snoozed": m.snoozed,
            "dead": m.dead, "cancelled": m.cancelled, "started": m.started,
            "wait_seconds": m.wait_seconds, "run_seconds": m.run_seconds,
            "wait_p99_secs": wait_quantile(&m.wait_buckets, 0.99).map(|d| d.as_secs_f64()),
        })).collect::<Vec<_>>(),
    }))
}

/// The stylesheet and the script, compiled in: no CDN, no build step.
const CSS: &str = include_str!("../assets/lq.css");
const JS: &str = include_str!("../assets/lq.js");

/// Assets are cached for a year: their links carry [`asset_version`], which
/// changes whenever their content does. Pages are never cached.
const ASSET_CACHE: &str = "public, max-age=31536000, immutable";

/// A short hash of both assets, put in their links (`lq.css?v=…`).
pub(crate) fn asset_version() -> &'static str {
    static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        // FNV-1a: stable across builds and platforms, unlike `DefaultHasher`.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in CSS.bytes().chain(JS.bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        format!("{:08x}", h as u32)
    });
    &VERSION
}

pub(crate) async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, ASSET_CACHE),
        ],
        CSS,
    )
        .into_response()
}

pub(crate) async fn js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, ASSET_CACHE),
        ],
        JS,
    )
        .into_response()
}
