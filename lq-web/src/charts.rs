//! Sparklines of the last hour per queue, drawn as inline SVG from the
//! per-minute rollup (`control::stats`): no script, no chart library.

use std::collections::BTreeMap;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use lq_core::control::{wait_quantile, MinuteStats};
use maud::{html, Markup};

/// Minutes a chart covers.
pub(crate) const MINUTES: usize = 60;

/// One queue's hour, minute by minute (oldest first).
#[derive(Debug, Clone)]
pub(crate) struct QueueHour {
    /// Attempts that succeeded.
    pub succeeded: Vec<f64>,
    /// Attempts that failed (retried or dead).
    pub failed: Vec<f64>,
    /// Wait buckets summed over kinds, per minute.
    buckets: Vec<Vec<i64>>,
    /// Total wait and attempts started, for the mean.
    wait_seconds: f64,
    started: i64,
}

impl QueueHour {
    fn new() -> Self {
        Self {
            succeeded: vec![0.0; MINUTES],
            failed: vec![0.0; MINUTES],
            buckets: vec![Vec::new(); MINUTES],
            wait_seconds: 0.0,
            started: 0,
        }
    }

    /// The 99th percentile wait of each minute, in seconds (0 without attempts).
    pub fn wait_p99(&self) -> Vec<f64> {
        self.buckets
            .iter()
            .map(|b| wait_quantile(b, 0.99).map_or(0.0, |d| d.as_secs_f64()))
            .collect()
    }

    /// The 99th percentile wait over the hour.
    pub fn hour_p99(&self) -> Option<std::time::Duration> {
        let mut sum: Vec<i64> = Vec::new();
        for b in &self.buckets {
            add(&mut sum, b);
        }
        wait_quantile(&sum, 0.99)
    }

    /// The mean wait over the hour.
    pub fn mean_wait(&self) -> Option<std::time::Duration> {
        (self.started > 0)
            .then(|| std::time::Duration::from_secs_f64(self.wait_seconds / self.started as f64))
    }
}

fn add(into: &mut Vec<i64>, b: &[i64]) {
    if into.len() < b.len() {
        into.resize(b.len(), 0);
    }
    for (a, x) in into.iter_mut().zip(b) {
        *a += x;
    }
}

/// The rollup rows grouped by queue into minute slots ending at `now`'s minute.
pub(crate) fn by_queue(rows: &[MinuteStats], now: DateTime<Utc>) -> BTreeMap<String, QueueHour> {
    let last = now.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now);
    let mut out: BTreeMap<String, QueueHour> = BTreeMap::new();
    for r in rows {
        let ago = (last - r.minute).num_minutes();
        let Ok(ago) = usize::try_from(ago) else {
            continue;
        };
        if ago >= MINUTES {
            continue;
        }
        let i = MINUTES - 1 - ago;
        let q = out.entry(r.queue.clone()).or_insert_with(QueueHour::new);
        q.succeeded[i] += r.succeeded as f64;
        q.failed[i] += (r.retried + r.dead) as f64;
        add(&mut q.buckets[i], &r.wait_buckets);
        q.wait_seconds += r.wait_seconds;
        q.started += r.started;
    }
    out
}

/// A sparkline of `lines` (CSS class and values, one per minute) on one scale,
/// with `label` as its accessible name and tooltip.
pub(crate) fn sparkline(label: &str, lines: &[(&str, &[f64])]) -> Markup {
    const W: f64 = 120.0;
    const H: f64 = 28.0;
    let max = lines
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0f64, f64::max);
    let points = |values: &[f64]| -> String {
        let step = W / (values.len().max(2) - 1) as f64;
        values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let y = if max > 0.0 {
                    H - 1.0 - v / max * (H - 2.0)
                } else {
                    H - 1.0
                };
                format!("{:.1},{:.1}", i as f64 * step, y)
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    html! {
        svg.spark viewBox="0 0 120 28" width="120" height="28" role="img" aria-label=(label) {
            title { (label) }
            @for (class, values) in lines {
                polyline class=(class) points=(points(values)) {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flat_line_sits_at_the_bottom_and_a_peak_at_the_top() {
        let svg = sparkline("x", &[("ok", &[0.0, 0.0])]).into_string();
        assert!(svg.contains("points=\"0.0,27.0 120.0,27.0\""), "{svg}");
        let svg = sparkline("x", &[("ok", &[0.0, 2.0])]).into_string();
        assert!(svg.contains("120.0,1.0"), "{svg}");
    }
}
