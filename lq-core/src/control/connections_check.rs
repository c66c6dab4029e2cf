//! The doctor's check that the server has connections to spare.

use super::doctor::Check;
use crate::db;

/// The share of the connections open to ordinary roles that must stay free.
const FREE_SHARE: f64 = 0.1;
/// Free connections that are enough on any server, however small.
const FREE_AT_LEAST: i64 = 3;

/// The connections' check. A runtime opens up to
/// `RuntimeBuilder::connections()` connections of its own (ten for one
/// queue) besides its application's pool, as its work needs them, and a
/// connect the server refuses waits for a free slot (`bench/FINDINGS.md`,
/// stops 69 and 70: sixteen runtimes on a server of 100 connections, nine
/// connects waiting 2.6–4.6 s). A finding when the live runtimes of this
/// database may open more connections than the server allows ordinary roles
/// (before a busy hour makes it so), and when fewer than a tenth of those
/// connections are free now, or fewer than [`FREE_AT_LEAST`].
pub(super) fn connections_check(c: &db::doctor::Connections) -> Check {
    let open = (c.max - c.reserved).max(0);
    let free = open - c.in_use;
    let wanted = ((open as f64 * FREE_SHARE).ceil() as i64).max(FREE_AT_LEAST);
    let counts = format!(
        "{} of max_connections {} in use ({} reserved for superusers)",
        c.in_use, c.max, c.reserved
    );
    let runtimes = runtimes_may_open(c);
    if c.runtimes_may_open > open {
        return Check {
            name: "connections",
            ok: false,
            detail: format!(
                "{counts}{runtimes}, more than the {open} the server allows ordinary roles: \
                 under load it will refuse some, and each refused connection waits. Raise \
                 max_connections, or open fewer (RuntimeConfig::pool_size, fewer runtime \
                 processes)"
            ),
        };
    }
    if free >= wanted {
        return Check {
            name: "connections",
            ok: true,
            detail: format!("{counts}: {free} free, a finding below {wanted}{runtimes}"),
        };
    }
    Check {
        name: "connections",
        ok: false,
        detail: format!(
            "{counts}: {} free, under {wanted}{runtimes}. A runtime opens up to ten \
             connections of its own for one queue, more for more queues, besides its \
             application's pool, and a runtime whose connect the server refuses waits: raise \
             max_connections, or open fewer (RuntimeConfig::pool_size, smaller application \
             pools, fewer processes)",
            free.max(0)
        ),
    }
}

/// What the live runtimes' rows say they may open, for the check's detail:
/// nothing when no runtime lives.
fn runtimes_may_open(c: &db::doctor::Connections) -> String {
    if c.runtimes_may_open == 0 && c.runtimes_unsized == 0 {
        return String::new();
    }
    let not_counted = match c.runtimes_unsized {
        0 => String::new(),
        n => format!(" ({n} built before schema 16 not counted)"),
    };
    format!(
        "; this database's live runtimes may open up to {} connections of their own{not_counted}",
        c.runtimes_may_open
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connections(in_use: i64, max: i64) -> db::doctor::Connections {
        db::doctor::Connections {
            in_use,
            max,
            reserved: 3,
            runtimes_may_open: 0,
            runtimes_unsized: 0,
        }
    }

    #[test]
    fn runtimes_that_may_open_more_than_the_server_allows_are_a_finding_while_idle() {
        // Sixteen runtimes of one queue each, idle: 20 sessions open of 97.
        let c = db::doctor::Connections {
            runtimes_may_open: 16 * 10,
            ..connections(20, 100)
        };
        let check = connections_check(&c);
        assert!(!check.ok, "{check:?}");
        assert_eq!(
            check.detail,
            "20 of max_connections 100 in use (3 reserved for superusers); this database's live \
             runtimes may open up to 160 connections of their own, more than the 97 the server \
             allows ordinary roles: under load it will refuse some, and each refused connection \
             waits. Raise max_connections, or open fewer (RuntimeConfig::pool_size, fewer \
             runtime processes)"
        );
        // Nine of them fit: the check passes and says what they may open.
        let c = db::doctor::Connections {
            runtimes_may_open: 90,
            runtimes_unsized: 2,
            ..connections(20, 100)
        };
        let check = connections_check(&c);
        assert!(check.ok, "{check:?}");
        assert!(
            check.detail.ends_with(
                "77 free, a finding below 10; this database's live runtimes may open up to 90 \
                 connections of their own (2 built before schema 16 not counted)"
            ),
            "{}",
            check.detail
        );
    }

    #[test]
    fn a_tenth_of_the_ordinary_connections_must_stay_free() {
        // 97 open to ordinary roles: 10 must stay free.
        let check = connections_check(&connections(87, 100));
        assert!(check.ok, "{check:?}");
        assert_eq!(
            check.detail,
            "87 of max_connections 100 in use (3 reserved for superusers): 10 free, a finding below 10"
        );
        let check = connections_check(&connections(88, 100));
        assert!(!check.ok, "{check:?}");
        assert!(
            check.detail.starts_with(
                "88 of max_connections 100 in use (3 reserved for superusers): 9 free, under 10. \
                 A runtime opens up to ten connections"
            ),
            "{}",
            check.detail
        );
        assert!(check.detail.contains("raise max_connections"));
    }

    #[test]
    fn a_small_server_keeps_three_free_and_a_full_one_reads_none_free() {
        assert!(connections_check(&connections(7, 13)).ok);
        assert!(!connections_check(&connections(8, 13)).ok);
        // Superusers may take the reserved slots: more in use than open.
        let check = connections_check(&connections(99, 100));
        assert!(!check.ok);
        assert!(
            check.detail.contains(": 0 free, under 10."),
            "{}",
            check.detail
        );
    }
}
