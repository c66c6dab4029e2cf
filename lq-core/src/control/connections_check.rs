//! The doctor's check that the server has connections to spare.

use super::doctor::Check;
use crate::db;

/// The share of the connections open to ordinary roles that must stay free.
const FREE_SHARE: f64 = 0.1;
/// Free connections that are enough on any server, however small.
const FREE_AT_LEAST: i64 = 3;

/// The connections' check. A runtime opens about ten connections of its own
/// for one queue (more for more queues) besides its application's pool, and
/// one whose connect the server refuses waits for it (measured in
/// `bench/FINDINGS.md`, stop 69: sixteen runtimes on a server of 100
/// connections drained at three quarters of one runtime's rate). A finding
/// when fewer than a tenth of the connections open to ordinary roles are
/// free, or fewer than [`FREE_AT_LEAST`].
pub(super) fn connections_check(c: &db::doctor::Connections) -> Check {
    let open = (c.max - c.reserved).max(0);
    let free = open - c.in_use;
    let wanted = ((open as f64 * FREE_SHARE).ceil() as i64).max(FREE_AT_LEAST);
    let counts = format!(
        "{} of max_connections {} in use ({} reserved for superusers)",
        c.in_use, c.max, c.reserved
    );
    if free >= wanted {
        return Check {
            name: "connections",
            ok: true,
            detail: format!("{counts}: {free} free, a finding below {wanted}"),
        };
    }
    Check {
        name: "connections",
        ok: false,
        detail: format!(
            "{counts}: {} free, under {wanted}. A runtime opens about ten connections of its \
             own for one queue, more for more queues, besides its application's pool, and \
             one the server refuses a connection waits for it: raise max_connections, or open \
             fewer (RuntimeConfig::pool_size, smaller application pools, fewer processes)",
            free.max(0)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connections(in_use: i64, max: i64) -> db::doctor::Connections {
        db::doctor::Connections {
            in_use,
            max,
            reserved: 3,
        }
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
                 A runtime opens about ten connections"
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
