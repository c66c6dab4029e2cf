//! Medians, spreads and percentiles.

use serde_json::{json, Value};

/// Median and min–max of a few runs.
#[derive(Debug, Clone)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: Vec<f64>,
}

impl Spread {
    pub fn of(runs: &[f64]) -> Spread {
        let mut v = runs.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = match n {
            0 => f64::NAN,
            _ if n % 2 == 1 => v[n / 2],
            _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Spread {
            median,
            min: *v.first().unwrap_or(&f64::NAN),
            max: *v.last().unwrap_or(&f64::NAN),
            runs: runs.to_vec(),
        }
    }

    pub fn json(&self) -> Value {
        json!({ "median": self.median, "min": self.min, "max": self.max, "runs": self.runs })
    }

    /// `12,345/s [12,000–12,500]`
    pub fn rate(&self) -> String {
        format!(
            "{}/s [{}–{}]",
            thousands(self.median),
            thousands(self.min),
            thousands(self.max)
        )
    }

    /// `1.23 [1.10–1.40]` with `digits` decimals.
    pub fn plain(&self, digits: usize) -> String {
        format!(
            "{:.d$} [{:.d$}–{:.d$}]",
            self.median,
            self.min,
            self.max,
            d = digits
        )
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// `1234567.8` -> `1,234,568`
pub fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".into();
    }
    let s = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}
