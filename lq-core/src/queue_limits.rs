//! The limits across every runtime a queue's claims obey, and how a runtime
//! records them for operators.

use std::fmt;

use serde_json::{json, Value};

use crate::RateLimit;

/// The limits across every runtime that a queue's claims obey, beyond each
/// runtime's own concurrency: at most `global` of its jobs running at once
/// (`RuntimeBuilder::global_limit`), and jobs started at most at `rate`
/// (`RuntimeBuilder::rate_limit`). Each runtime records its own in
/// `lq.runtimes`, so `lq doctor` can say when runtimes serving one queue
/// disagree.
///
/// ```
/// use lq_core::{QueueLimits, RateLimit};
///
/// let limits = QueueLimits { global: Some(4), rate: Some(RateLimit::per_minute(600)) };
/// assert_eq!(limits.to_string(), "at most 4 at once, 600 per 60s");
/// assert_eq!(QueueLimits::from_json(&limits.to_json()), limits);
/// assert_eq!(QueueLimits::default().to_string(), "none");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct QueueLimits {
    /// Most jobs of the queue running at once (Oban's and River's global limit).
    pub global: Option<u32>,
    /// Most jobs of the queue started per period.
    pub rate: Option<RateLimit>,
}

impl QueueLimits {
    /// Neither limit.
    pub fn is_none(&self) -> bool {
        self.global.is_none() && self.rate.is_none()
    }

    /// As a runtime records them in `lq.runtimes.limits`:
    /// `{"global": 4, "rate": {"allowed": 600, "period_secs": 60.0}}`, each
    /// key only when set.
    pub fn to_json(&self) -> Value {
        let mut o = serde_json::Map::new();
        if let Some(n) = self.global {
            o.insert("global".into(), json!(n));
        }
        if let Some(r) = self.rate {
            o.insert(
                "rate".into(),
                json!({"allowed": r.allowed(), "period_secs": r.period().as_secs_f64()}),
            );
        }
        Value::Object(o)
    }

    /// Reads what [`to_json`](Self::to_json) wrote; what it does not
    /// recognise reads as no limit.
    pub fn from_json(v: &Value) -> Self {
        let global = v["global"].as_u64().and_then(|n| u32::try_from(n).ok());
        let rate = match (
            v["rate"]["allowed"].as_u64(),
            v["rate"]["period_secs"].as_f64(),
        ) {
            (Some(allowed), Some(secs)) => u32::try_from(allowed).ok().and_then(|allowed| {
                let period = std::time::Duration::try_from_secs_f64(secs).ok()?;
                Some(RateLimit::new(allowed, period))
            }),
            _ => None,
        };
        Self { global, rate }
    }
}

impl fmt::Display for QueueLimits {
    /// `at most 4 at once, 600 per 60s`, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.global, self.rate) {
            (None, None) => f.write_str("none"),
            (Some(n), None) => write!(f, "at most {n} at once"),
            (None, Some(r)) => write!(f, "{r}"),
            (Some(n), Some(r)) => write!(f, "at most {n} at once, {r}"),
        }
    }
}
