//! The doctor's check that checkpoints come from `checkpoint_timeout`, not
//! from the WAL outgrowing `max_wal_size`.

use super::doctor::{wal_size, Check};
use crate::db;

/// Requested checkpoints that, once they also outnumber the timed ones, are a
/// finding: a few come from `CHECKPOINT`, `DROP DATABASE` and base backups.
const REQUESTED_CHECKPOINTS: i64 = 10;

/// The checkpoints' check. A checkpoint writes every page changed since the
/// one before in full into the WAL again, and flushes them all; when the WAL
/// reaches `max_wal_size` before `checkpoint_timeout` passes, they come one on
/// the heels of the next, and a queue under load stalls inside them (a queue
/// writes about a kilobyte of WAL a job). A finding once requested checkpoints
/// are at least [`REQUESTED_CHECKPOINTS`] and outnumber the timed ones.
pub(super) fn checkpoints_check(c: &db::doctor::Checkpoints) -> Check {
    let since = c
        .counted_secs
        .map(|s| format!(" in the {} since the counts were reset", span(s)))
        .unwrap_or_default();
    let counts = format!(
        "{} checkpoints timed and {} requested{since}",
        c.timed, c.requested
    );
    if c.requested < REQUESTED_CHECKPOINTS || c.requested <= c.timed {
        return Check {
            name: "checkpoints",
            ok: true,
            detail: format!(
                "{counts} (checkpoint_timeout {}, max_wal_size {}): requested ones are a \
                 finding from {REQUESTED_CHECKPOINTS} on, once they outnumber the timed",
                span(c.checkpoint_timeout_secs as f64),
                wal_size(c.max_wal_size)
            ),
        };
    }
    Check {
        name: "checkpoints",
        ok: false,
        detail: format!(
            "{counts}: the WAL keeps reaching max_wal_size ({}) before checkpoint_timeout ({}) \
             passes (or CHECKPOINT, DROP DATABASE or a base backup asked for them). Each \
             checkpoint writes every page changed since the one before into the WAL again, \
             and a queue under load stalls while they follow each other (it writes about a \
             kilobyte of WAL a job): raise max_wal_size until most are timed, then reset the \
             counts: select pg_stat_reset_shared('{}')",
            wal_size(c.max_wal_size),
            span(c.checkpoint_timeout_secs as f64),
            c.reset_target
        ),
    }
}

/// `secs` in the largest unit that keeps it at one or more (`45 s`, `5 min`,
/// `3.5 h`, `12.0 days`).
fn span(secs: f64) -> String {
    let secs = secs.max(0.0);
    if secs < 60.0 {
        format!("{secs:.0} s")
    } else if secs < 3600.0 {
        format!("{:.0} min", secs / 60.0)
    } else if secs < 86_400.0 {
        format!("{:.1} h", secs / 3600.0)
    } else {
        format!("{:.1} days", secs / 86_400.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_in_the_largest_unit_at_one_or_more() {
        assert_eq!(span(-1.0), "0 s");
        assert_eq!(span(59.4), "59 s");
        assert_eq!(span(300.0), "5 min");
        assert_eq!(span(3.5 * 3600.0), "3.5 h");
        assert_eq!(span(12.0 * 86_400.0), "12.0 days");
    }

    fn checkpoints(timed: i64, requested: i64) -> db::doctor::Checkpoints {
        db::doctor::Checkpoints {
            timed,
            requested,
            counted_secs: Some(2.0 * 86_400.0),
            max_wal_size: 1 << 30,
            checkpoint_timeout_secs: 300,
            reset_target: "bgwriter".to_owned(),
        }
    }

    #[test]
    fn checkpoints_are_a_finding_once_ten_or_more_were_requested_and_outnumber_the_timed() {
        let c = checkpoints(500, 40);
        assert!(c.requested >= REQUESTED_CHECKPOINTS);
        let check = checkpoints_check(&c);
        assert!(check.ok, "{check:?}");
        assert_eq!(
            check.detail,
            "500 checkpoints timed and 40 requested in the 2.0 days since the counts were \
             reset (checkpoint_timeout 5 min, max_wal_size 1.0 GB): requested ones are a \
             finding from 10 on, once they outnumber the timed"
        );
        assert!(checkpoints_check(&checkpoints(0, REQUESTED_CHECKPOINTS - 1)).ok);
        assert!(checkpoints_check(&checkpoints(12, 12)).ok);
        let check = checkpoints_check(&checkpoints(12, 13));
        assert!(!check.ok);
        assert!(
            check.detail.starts_with(
                "12 checkpoints timed and 13 requested in the 2.0 days since the counts were \
                 reset: the WAL keeps reaching max_wal_size (1.0 GB) before checkpoint_timeout \
                 (5 min) passes"
            ),
            "{}",
            check.detail
        );
        assert!(
            check
                .detail
                .ends_with("select pg_stat_reset_shared('bgwriter')"),
            "{}",
            check.detail
        );
        let unknown_reset = db::doctor::Checkpoints {
            counted_secs: None,
            ..checkpoints(0, 0)
        };
        assert!(checkpoints_check(&unknown_reset)
            .detail
            .starts_with("0 checkpoints timed and 0 requested (checkpoint_timeout"));
    }
}
