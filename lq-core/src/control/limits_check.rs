//! The doctor's check that the runtimes serving a queue agree on its limits.

use std::collections::BTreeMap;

use super::doctor::Check;
use crate::{db::cluster::RuntimeRow, QueueLimits};

/// Each queue whose live runtimes set different limits on it (a global limit,
/// a rate limit, or none): each runtime enforces its own, so a runtime
/// without the limit, or with a larger one, claims past what the others keep
/// to. A runtime built before schema 13 records none, which is what it
/// enforces.
pub(super) fn limits_check(runtimes: &[RuntimeRow]) -> Check {
    // queue -> the limits as written -> the runtimes that set them
    let mut seen: BTreeMap<&str, BTreeMap<String, Vec<&str>>> = BTreeMap::new();
    for r in runtimes.iter().filter(|r| r.alive) {
        let Some(queues) = r.queues.as_object() else {
            continue;
        };
        for queue in queues.keys() {
            let limits = r
                .limits
                .as_ref()
                .map(|l| QueueLimits::from_json(&l[queue.as_str()]))
                .unwrap_or_default();
            seen.entry(queue)
                .or_default()
                .entry(limits.to_string())
                .or_default()
                .push(&r.id);
        }
    }
    let disagreeing: Vec<String> = seen
        .iter()
        .filter(|(_, by_limits)| by_limits.len() > 1)
        .map(|(queue, by_limits)| {
            let sides: Vec<String> = by_limits
                .iter()
                .map(|(limits, ids)| format!("{limits} ({})", ids.join(", ")))
                .collect();
            format!("{queue}: {}", sides.join("; "))
        })
        .collect();
    Check {
        name: "limits",
        ok: disagreeing.is_empty(),
        detail: if disagreeing.is_empty() {
            "the live runtimes serving each queue set the same limits on it".to_owned()
        } else {
            format!(
                "live runtimes serving one queue set different limits, so the lower one does \
                 not hold (each runtime enforces its own; one without a limit claims as if \
                 there were none): {}; give every runtime serving the queue the same \
                 .global_limit() and .rate_limit()",
                disagreeing.join("; ")
            )
        },
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::{json, Value};

    use super::*;

    fn runtime(id: &str, queues: Value, limits: Option<Value>, alive: bool) -> RuntimeRow {
        RuntimeRow {
            id: id.to_owned(),
            host: "h".to_owned(),
            pid: 1,
            version: "0".to_owned(),
            queues,
            limits,
            kinds: Vec::new(),
            connections: Some(10),
            started_at: Utc::now(),
            heartbeat_at: Utc::now(),
            expires_at: Utc::now(),
            alive,
            leader: false,
        }
    }

    #[test]
    fn runtimes_that_agree_pass_and_one_without_the_limit_is_named() {
        let limited = json!({"api": {"global": 4, "rate": {"allowed": 600, "period_secs": 60.0}}});
        let agree = [
            runtime(
                "a",
                json!({"api": 10, "mail": 2}),
                Some(limited.clone()),
                true,
            ),
            runtime("b", json!({"api": 3}), Some(limited.clone()), true),
            // a dead runtime's row does not count
            runtime("c", json!({"api": 3}), None, false),
        ];
        let check = limits_check(&agree);
        assert!(check.ok, "{check:?}");

        let mut disagree = agree.to_vec();
        disagree.push(runtime("d", json!({"api": 8}), None, true)); // built before schema 13
        disagree.push(runtime(
            "e",
            json!({"mail": 1}),
            Some(json!({"mail": {"global": 1}})),
            true,
        ));
        let check = limits_check(&disagree);
        assert!(!check.ok);
        assert!(
            check.detail.contains(
                "api: at most 4 at once, 600 per 60s (a, b); none (d); mail: at most 1 at once (e); none (a)"
            ),
            "{}",
            check.detail
        );
    }
}
