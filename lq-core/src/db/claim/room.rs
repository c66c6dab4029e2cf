//! Claim rooms: where a claim waiting its turn queues before it waits for its
//! slot, holding no snapshot (schema version 14, `docs/internals.md`, "Claim
//! slots").
//!
//! A wait for a claim slot is a statement, and a statement holds a snapshot,
//! which keeps PostgreSQL from marking dead the index entries of jobs claimed
//! and finished since: every claim then walks past them. `lock table` is a
//! utility statement and takes no snapshot while it waits (once the session
//! has the room's name cached, which its first wait does), so waiters queue in
//! a room and only the room's holder waits for the slot itself.

use sqlx::PgConnection;

/// How many rooms there are: the views `lq.claim_room_00` to `lq.claim_room_15`.
pub const CLAIM_ROOMS: u32 = 16;

/// The room of claim slot `slot` of `queue`, in `0..CLAIM_ROOMS`. A queue's
/// slots get different rooms, so a waiter for a slot that frees is not queued
/// behind a waiter for another. Two queues may share a room, which only orders
/// their waiters: the slot's advisory lock alone bounds the claims. Runtimes
/// that picked different rooms for one slot would still be bounded by it; each
/// room would just let one more waiter hold a snapshot. So the hash is fixed
/// (32-bit FNV-1a of the name's bytes), not the standard library's, whose
/// output may change between Rust releases.
///
/// ```
/// use lq_core::db::claim::{claim_room, CLAIM_ROOMS};
/// assert!(claim_room("emails", 0) < CLAIM_ROOMS);
/// assert_ne!(claim_room("emails", 0), claim_room("emails", 1));
/// ```
pub fn claim_room(queue: &str, slot: u32) -> u32 {
    let hash = queue.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    hash.wrapping_add(slot) % CLAIM_ROOMS
}

/// In the transaction open on `tx`, bounds each lock wait and any idle time
/// at `ms` milliseconds, then waits for room `room` (held until the
/// transaction ends). One round trip, a simple query: the settings come first
/// so they bound the room's wait; `statement_timeout` is left to the statement
/// after it, since set here it would cut this wait off before `lock_timeout`,
/// with an error that does not read as a timed-out wait.
pub(super) async fn wait_in_room(
    tx: &mut PgConnection,
    room: u32,
    ms: &str,
) -> Result<(), sqlx::Error> {
    // `ms` is a number and `room` under 16: nothing here comes from a user.
    debug_assert!(ms.bytes().all(|b| b.is_ascii_digit()) && room < CLAIM_ROOMS);
    let sql = format!(
        "set local lock_timeout = '{ms}ms';
         set local idle_in_transaction_session_timeout = '{ms}ms';
         lock table lq.claim_room_{room:02} in exclusive mode"
    );
    // A `&str` without arguments goes as a simple query, so several statements
    // in one round trip (`sqlx::raw_sql` would too, but its future does not
    // satisfy the runtime's spawned tasks' `Send` bound here).
    sqlx::Executor::execute(&mut *tx, sql.as_str())
        .await
        .map(drop)
}
