//! A curve's points measured in rounds: each round drains every point once,
//! so the host's drift over the minutes a curve takes falls on all its points
//! alike, and a row shows the median drain of its point with the range of all.
//! One drain per point could not tell a dip from the host's drift (the README's
//! 2M backlog point, stops 59 and 61).

use serde_json::{json, Value};

use super::Drained;
use crate::stats::thousands;

/// Rounds of every curve: `LQ_BENCH_CURVES_ROUNDS`, else 3 (1 with `--quick`).
pub fn rounds(quick: bool) -> usize {
    std::env::var("LQ_BENCH_CURVES_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r| *r >= 1)
        .unwrap_or(if quick { 1 } else { 3 })
}

/// `" (round 2 of 3)"` for an announcement; empty with one round.
pub fn label(round: usize, of: usize) -> String {
    if of == 1 {
        String::new()
    } else {
        format!(" (round {round} of {of})")
    }
}

/// One drain of a point, with what its curve adds to the row and the JSON.
pub struct Run {
    pub drained: Drained,
    /// Shown before the drain's own figures in the row (WAL a job, say).
    pub lead: String,
    /// Shown after them (the work a job, say).
    pub trail: String,
    /// The curve's own figures of this drain, merged into its JSON.
    pub extra: Value,
}

impl Run {
    /// A run whose curve adds nothing.
    pub fn plain(drained: Drained) -> Self {
        Run {
            drained,
            lead: String::new(),
            trail: String::new(),
            extra: json!({}),
        }
    }

    fn json(&self) -> Value {
        let mut v = self.drained.json();
        if let (Some(v), Some(extra)) = (v.as_object_mut(), self.extra.as_object()) {
            v.extend(extra.clone());
        }
        v
    }
}

/// The runs of one point, in the order they ran.
#[derive(Default)]
pub struct Point {
    runs: Vec<Run>,
}

impl Point {
    pub fn push(&mut self, run: Run) {
        self.runs.push(run);
    }

    /// The run of median rate (the lower of the middle two of an even count).
    pub fn median(&self) -> &Run {
        let mut by_rate: Vec<&Run> = self.runs.iter().collect();
        by_rate.sort_by(|a, b| a.drained.rate().total_cmp(&b.drained.rate()));
        by_rate[(by_rate.len() - 1) / 2]
    }

    /// `72,413/s`, with `[min–max]` of every run when there are several.
    pub fn rate(&self) -> String {
        let median = format!("{}/s", thousands(self.median().drained.rate()));
        if self.runs.len() < 2 {
            return median;
        }
        let rates = self.runs.iter().map(|r| r.drained.rate());
        let low = rates.clone().fold(f64::INFINITY, f64::min);
        let high = rates.fold(0.0, f64::max);
        format!("{median} [{}–{}]", thousands(low), thousands(high))
    }

    /// The median run's figures, for the row's reference column.
    pub fn tail(&self) -> String {
        let m = self.median();
        format!("{}{}{}", m.lead, m.drained.tail(), m.trail)
    }

    /// The median run's JSON, with every run's in `runs` (in the order run).
    pub fn json(&self) -> Value {
        let mut v = self.median().json();
        v["runs"] = Value::Array(self.runs.iter().map(Run::json).collect());
        v
    }
}

/// One empty [`Point`] for each of `n` points.
pub fn points(n: usize) -> Vec<Point> {
    (0..n).map(|_| Point::default()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::curves::{claims::Latency, watch::Waits};

    /// A run that drained 1,000 jobs in `secs`, tagged with `tag`.
    fn run(secs: f64, tag: u32) -> Run {
        Run {
            extra: json!({ "tag": tag }),
            ..Run::plain(Drained {
                jobs: 1_000,
                secs,
                commits_per_job: 0.01,
                claims: Latency::of(&[]),
                waits: Waits::default(),
                cores_runtime: 0.4,
                cores_pg: 1.2,
            })
        }
    }

    #[test]
    fn a_point_shows_its_median_run_and_the_range_of_all() {
        let mut point = Point::default();
        for (secs, tag) in [(0.02, 1), (0.04, 2), (0.01, 3)] {
            point.push(run(secs, tag));
        }
        assert_eq!(point.rate(), "50,000/s [25,000–100,000]");
        let json = point.json();
        assert_eq!(json["tag"], 1, "the median run's own figures");
        let tags: Vec<_> = json["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["tag"].clone())
            .collect();
        assert_eq!(tags, [1, 2, 3], "every run, in the order run");
    }

    #[test]
    fn of_an_even_count_the_lower_middle_run_is_the_median_and_one_run_shows_no_range() {
        let mut point = Point::default();
        point.push(run(0.01, 1));
        assert_eq!(point.rate(), "100,000/s");
        point.push(run(0.02, 2));
        assert_eq!(point.median().extra["tag"], 2);
    }
}
