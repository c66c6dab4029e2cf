//! The claim: one statement that takes a batch of ready jobs and leases them.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::err;
use crate::Error;

/// The rows a claim may take from the queue named by `$queue` (SQL text): queued,
/// due by `$clock`, of a kind in `$2`, the queue not paused. Shared by
/// [`job_claim`] and [`queues_ready`], so the poll wakes a queue exactly when its
/// claim would find work.
macro_rules! claimable_in {
    ($queue:literal, $clock:literal) => {
        concat!(
            "state = 'queued' and queue = ",
            $queue,
            " and run_at <= ",
            $clock,
            " and kind = any($2)
               and not exists (select from lq.queues q where q.name = ",
            $queue,
            " and q.paused_at is not null)"
        )
    };
}

/// A job just claimed by this worker.
///
/// Decoded by column position, in the order of [`CLAIMED_COLUMNS`], which every
/// statement returning claimed jobs follows: a drain decodes some 70,000 of these
/// a second, and looking each column up by name was a quarter of the decoding
/// (`bench/FINDINGS.md`, "Stop 51").
#[derive(Debug)]
pub struct ClaimedJob {
    /// Job id.
    pub id: i64,
    /// Kind stored in the row.
    pub kind: String,
    /// Payload as JSON text, decoded by the job's type.
    pub payload: String,
    /// This attempt's number (already counted).
    pub attempts: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// The lease token minted by this claim; every later write must present it.
    pub lease_token: Uuid,
    /// When the attempt was due.
    pub run_at: DateTime<Utc>,
    /// When the job was enqueued.
    pub created_at: DateTime<Utc>,
    /// When this claim started the attempt (database time): its wait is
    /// `started_at - run_at`.
    pub started_at: DateTime<Utc>,
    /// The job's metadata as JSON text, if any.
    pub meta: Option<String>,
}

/// The columns a statement returning [`ClaimedJob`]s returns first, in this order
/// (more may follow, such as the test runner's `queue`). Debug builds check each
/// row's names against it, so a statement that returns them in another order
/// fails the tests instead of swapping two timestamps.
pub const CLAIMED_COLUMNS: [&str; 10] = [
    "id",
    "kind",
    "payload",
    "attempts",
    "max_attempts",
    "lease_token",
    "run_at",
    "created_at",
    "started_at",
    "meta",
];

impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for ClaimedJob {
    fn from_row(row: &'r sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use sqlx::{Column, Row};
        debug_assert!(
            CLAIMED_COLUMNS
                .iter()
                .zip(row.columns())
                .all(|(want, got)| *want == got.name()),
            "a claimed job's columns come in the order of CLAIMED_COLUMNS: {:?}",
            row.columns().iter().map(|c| c.name()).collect::<Vec<_>>()
        );
        Ok(Self {
            id: row.try_get(0)?,
            kind: row.try_get(1)?,
            payload: row.try_get(2)?,
            attempts: row.try_get(3)?,
            max_attempts: row.try_get(4)?,
            lease_token: row.try_get(5)?,
            run_at: row.try_get(6)?,
            created_at: row.try_get(7)?,
            started_at: row.try_get(8)?,
            meta: row.try_get(9)?,
        })
    }
}

/// The locking select and the update shared by [`job_claim`],
/// [`job_claim_gated`] and [`job_claim_in_turn`] (SQL text, `$gate` a condition
/// on the gate, or `true`; `$clock` the time the attempt starts). A statement of
/// its own is its transaction, and reads `now()`; [`job_claim_in_turn`] claims in
/// a transaction that began before it waited for its slot, where `now()` would
/// start the attempt, and its lease, at the start of the wait (a wait longer than
/// the lease would hand the rescuer jobs a healthy worker holds), so it reads
/// `statement_timestamp()`.
///
/// The update finds each locked row by its tuple id (`ctid`), not its primary
/// key, which saves an index probe per job. The lock leaves the row's newest
/// version in `picked`, and nothing can move it before the update in the same
/// statement. One case differs from a probe by id: a row the claim's snapshot
/// saw queued, which another claim then took and handed back (or the rescuer
/// freed) before this claim's scan reached it, is locked by a queued version the
/// snapshot cannot see, so the update skips it. It stays queued, its attempt
/// not counted, and the hand-back's wake-up brings the next claim to it.
macro_rules! claim_statement {
    ($gate:literal, $clock:literal) => {
        concat!(
            claim_ctes!($gate, $clock, "$3"),
            "\n         select * from claimed"
        )
    };
}

/// The CTEs of [`claim_statement!`], `picked` and `claimed`, without the final
/// select, taking at most `$limit` rows (SQL text): for a statement that does
/// more with the claimed rows (the rate limit's debit, [`job_claim_limited`]).
macro_rules! claim_ctes {
    ($gate:literal, $clock:literal, $limit:literal) => {
        concat!(
            "picked as materialized (
             select ctid from lq.jobs
             where ",
            claimable_in!("$1", $clock),
            " and ",
            $gate,
            "
             order by priority desc, run_at, id
             limit ",
            $limit,
            "
             for update skip locked
         ),
         claimed as (
             update lq.jobs j
             set state = 'running', attempts = j.attempts + 1, started_at = ",
            $clock,
            ",
                 lease_token = lease.token, lease_owner = $4,
                 lease_expires_at = ",
            $clock,
            " + make_interval(secs => ($5::float8[])[array_position($2::text[], j.kind)])
             from rows from (unnest(array(select ctid from picked)), unnest($6::uuid[])) as lease(tid, token)
             where j.ctid = lease.tid
             returning j.id, j.kind, j.payload::text as payload, j.attempts, j.max_attempts, j.lease_token,
                       j.run_at, j.created_at, j.started_at, j.meta::text as meta
         )"
        )
    };
}

// After the macros above, which it uses (a macro is in scope below its definition).
mod limited;
mod room;
pub use limited::{job_claim_limited, Limited, GLOBAL_LIMIT_LOCK_KEY};
pub use room::{claim_room, CLAIM_ROOMS};

/// First key of the advisory locks that bound the claims in flight on a queue
/// (`lqc` and a slot number; the second key is `hashtext(queue)`). Operators see
/// them in `pg_locks` as advisory locks with `classid` from this to this plus the
/// slots, held for one claim statement each.
pub const CLAIM_SLOT_LOCK_KEY: i32 = 0x6c71_6300;

/// Most claim slots a queue may have: the gate tries them one after another.
pub const MOST_CLAIM_SLOTS: u32 = 64;

/// Claims up to `limit` ready jobs of `kinds` from `queue`, best first; none
/// while the queue is paused (`lq.queues`, one index probe per claim).
///
/// The locking select is a materialised CTE, so it runs once and can never claim
/// more than `limit` rows. `lease_secs[i]` is the lease for `kinds[i]`. The attempt
/// is counted here, so a job that kills its worker still runs out of attempts.
/// Each job gets a random lease token of its own from `spec.tokens`, minted by
/// the caller ([`mint_lease_tokens`]) and paired with the claimed rows in the
/// statement: a caller whose claim got no answer knows the tokens it may have
/// leased and can hand those jobs back ([`super::finish::job_release_unanswered`]).
///
/// The runtime runs it on connections that force one generic plan, with table
/// scans and sorts ruled out ([`super::HOT_PATH_SETTINGS`]): the pickup
/// index in order, then each locked row by its tuple id. That saves a fresh
/// plan per claim, which cost as much as a third of a 100-row claim; left to
/// choose, PostgreSQL keeps planning anew, because a generic `limit $3` is
/// costed as a tenth of the table.
/// The runtime claims through [`job_claim_gated`]; this one has no bound on the
/// claims in flight.
pub async fn job_claim(
    conn: &mut PgConnection,
    queue: &str,
    kinds: &[String],
    lease_secs: &[f64],
    limit: i64,
    owner: &str,
) -> Result<Vec<ClaimedJob>, Error> {
    let tokens = mint_lease_tokens(usize::try_from(limit).unwrap_or(0))?;
    let spec = ClaimSpec {
        queue,
        kinds,
        lease_secs,
        limit,
        owner,
        tokens: &tokens,
    };
    spec.claim(conn).await
}

/// `sql`, a [`claim_statement!`], with `spec` bound as `$1`–`$5` and its lease
/// tokens, one for each job it may claim, as `$6`; each row decoded as `O`
/// (a [`ClaimedJob`], or a row that begins with one). Callers bind more from `$7`.
fn claim_query<'q, O>(
    sql: &'q str,
    spec: ClaimSpec<'q>,
) -> Result<sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>, Error>
where
    O: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
{
    enough_tokens(&spec)?;
    Ok(sqlx::query_as(sql)
        .bind(spec.queue)
        .bind(spec.kinds)
        .bind(spec.limit)
        .bind(spec.owner)
        .bind(spec.lease_secs)
        .bind(spec.tokens))
}

/// Fails unless `spec` has a lease token for every job it may claim: a job past
/// the last token would be leased without one, which the table's lease check
/// refuses, so say why here instead.
fn enough_tokens(spec: &ClaimSpec<'_>) -> Result<(), Error> {
    if usize::try_from(spec.limit).unwrap_or(usize::MAX) > spec.tokens.len() {
        return Err(err("job_claim")(sqlx::Error::Protocol(format!(
            "a claim of up to {} jobs was given {} lease tokens",
            spec.limit,
            spec.tokens.len()
        ))));
    }
    Ok(())
}

/// What a claim asks for: up to `limit` ready jobs of `kinds` from `queue`, leased
/// to `owner` for `lease_secs[i]` seconds for `kinds[i]` (see [`job_claim`]).
#[derive(Debug, Clone, Copy)]
pub struct ClaimSpec<'a> {
    /// The queue to claim from.
    pub queue: &'a str,
    /// The kinds the claimer runs.
    pub kinds: &'a [String],
    /// The lease of each kind, in seconds.
    pub lease_secs: &'a [f64],
    /// Most jobs to claim.
    pub limit: i64,
    /// The lease owner written into the rows.
    pub owner: &'a str,
    /// A fresh lease token for each job the claim may take (at least `limit`,
    /// from [`mint_lease_tokens`]); the claimed jobs get the first ones, in the
    /// order they are claimed.
    pub tokens: &'a [Uuid],
}

impl ClaimSpec<'_> {
    /// [`job_claim`] of this spec, ungated, with its own tokens.
    pub async fn claim(&self, conn: &mut PgConnection) -> Result<Vec<ClaimedJob>, Error> {
        claim_query(concat!("with ", claim_statement!("true", "now()")), *self)?
            .fetch_all(&mut *conn)
            .await
            .map_err(err("job_claim"))
    }
}

/// What a gated claim found: the jobs it claimed, or that every claim slot of the
/// queue was taken by other claims, so it claimed nothing and should wait for
/// its turn ([`job_claim_in_turn`]).
#[derive(Debug)]
pub enum GatedClaim {
    /// The claim ran: these jobs (fewer than asked when the queue ran dry).
    Claimed(Vec<ClaimedJob>),
    /// All `slots` claims allowed on the queue were in flight; nothing was claimed.
    Throttled,
}

/// [`job_claim`], but only while fewer than `slots` claims on `queue` are in
/// flight across every session of the database: the statement first takes one of
/// the queue's `slots` advisory locks with a try (held until it commits), and
/// when all are taken claims nothing and says so. `slots` is at most
/// [`MOST_CLAIM_SLOTS`].
///
/// Why: a claim scans the pickup index under the snapshot its statement began
/// with. A row another claim took and committed since still looks queued to it;
/// `for update` follows the row to its newest version and locks it before the
/// recheck rejects it, and that lock is held until the claim commits. With many
/// claims in flight on one queue (16 runtime processes, two claims each), such
/// locks stall the completions of jobs other processes claimed and chain claims
/// behind each other: claims took 300-400 ms and 16 processes drained a third
/// as fast as one (`bench/FINDINGS.md`, stops 45 and 46). A claim that waits its
/// turn starts with a snapshot that holds the previous claims' commits.
pub async fn job_claim_gated(
    conn: &mut PgConnection,
    spec: ClaimSpec<'_>,
    slots: u32,
) -> Result<GatedClaim, Error> {
    let sql = concat!(
        "with gate as materialized (
             select exists (
                 select from generate_series(0, $8 - 1) as slot
                 where pg_try_advisory_xact_lock($7 + slot, hashtext($1))
             ) as open
         ), ",
        claim_statement!("(select open from gate)", "now()"),
        "
         union all
         select 0, '', '', 0, 0, '00000000-0000-0000-0000-000000000000'::uuid,
                now(), now(), now(), null
         from gate where not open"
    );
    let rows: Vec<ClaimedJob> = claim_query(sql, spec)?
        .bind(CLAIM_SLOT_LOCK_KEY)
        .bind(i32::try_from(slots.min(MOST_CLAIM_SLOTS)).expect("at most 64"))
        .fetch_all(&mut *conn)
        .await
        .map_err(err("job_claim"))?;
    // The statement says the gate was shut with a row whose lease token is nil,
    // which no claimed job has (each gets a fresh random v4 token).
    if rows.first().is_some_and(|r| r.lease_token.is_nil()) {
        return Ok(GatedClaim::Throttled);
    }
    Ok(GatedClaim::Claimed(rows))
}

/// What a claim in turn ([`job_claim_in_turn`]) came to.
#[derive(Debug)]
pub enum Turn {
    /// Its turn came and it claimed these jobs (committed).
    Claimed(Vec<ClaimedJob>),
    /// The slot stayed taken past the wait's bound: nothing claimed, the
    /// transaction rolled back, the connection fit for another try.
    TimedOut,
    /// The caller gave up while it waited: nothing claimed, but the wait was cut
    /// off mid-statement, so the connection must be closed, not reused (the
    /// server then rolls the transaction back).
    GaveUp,
    /// The server refused the claim's room (this error: a role without UPDATE
    /// on `lq.claim_room_NN`, or a schema without them): nothing claimed, the
    /// transaction rolled back, the connection fit for a claim without a room.
    NoRoom(Error),
}

/// [`job_claim`] in turn: waits for claim slot `slot` of `queue` (the advisory
/// lock [`job_claim_gated`] tries), then claims, in one transaction that holds the
/// slot until it commits. For a claim [`GatedClaim::Throttled`]: the server queues
/// the waiters in order, and each claim's statement begins after the claim it
/// waited for committed, so it does not meet the rows that one took. Four round
/// trips, paid only when the queue's claims contend; five `in_room`.
///
/// `in_room`: the claim first waits in the slot's claim room ([`claim_room`]),
/// which holds no snapshot, so of all the claims waiting for the slot only the
/// room's holder holds one. A waiting snapshot keeps PostgreSQL from marking
/// dead the index entries of jobs claimed since, and every claim walks past
/// them: sixteen runtime processes on one queue drained about a ninth faster
/// with rooms, every run of four (`bench/FINDINGS.md`, stop 61). Refused the
/// room, the call claims nothing and says so ([`Turn::NoRoom`]).
///
/// `bound` is the caller's bound on the whole call: the wait for the room, the
/// wait for the slot and the claim each get an equal share of four fifths of it
/// (at least 50 ms) on the server (`lock_timeout`, `statement_timeout`), so the
/// transaction commits or fails before the caller gives up, and a session left
/// idle inside it (a client gone without a word) is ended after the same time,
/// freeing the slot. `give_up` (a shutdown) cuts the waits short, never the
/// claim or its commit, so no claim commits unseen.
pub async fn job_claim_in_turn(
    conn: &mut PgConnection,
    spec: ClaimSpec<'_>,
    slot: u32,
    in_room: bool,
    bound: std::time::Duration,
    give_up: impl std::future::Future<Output = ()>,
) -> Result<Turn, Error> {
    let slot = slot.min(MOST_CLAIM_SLOTS - 1);
    let key = CLAIM_SLOT_LOCK_KEY + i32::try_from(slot).expect("under 64");
    let lock = Lock {
        key,
        queue: spec.queue,
        room: in_room.then(|| claim_room(spec.queue, slot)),
    };
    let statements = if in_room { 3 } else { 2 };
    let mut tx = match wait_for_lock(conn, lock, bound, statements, give_up).await? {
        Waited::Holding(tx) => tx,
        Waited::TimedOut => return Ok(Turn::TimedOut),
        Waited::GaveUp => return Ok(Turn::GaveUp),
        Waited::NoRoom(e) => return Ok(Turn::NoRoom(e)),
    };
    let sql = concat!("with ", claim_statement!("true", "statement_timestamp()"));
    let jobs = claim_query(sql, spec)?
        .fetch_all(&mut *tx)
        .await
        .map_err(err("job_claim"))?;
    tx.commit().await.map_err(err("job_claim"))?;
    Ok(Turn::Claimed(jobs))
}

/// How a wait for an advisory lock ended.
enum Waited<'c> {
    /// The lock is held by this open transaction, until it ends.
    Holding(sqlx::Transaction<'c, sqlx::Postgres>),
    /// Not granted within the bound; the transaction rolled back.
    TimedOut,
    /// The caller gave up mid-wait; the connection must be closed.
    GaveUp,
    /// The server refused the room (this error); the transaction rolled back.
    NoRoom(Error),
}

/// The advisory lock `(key, hashtext(queue))` a transaction waits for, and the
/// claim room it first waits in, if any.
struct Lock<'a> {
    key: i32,
    queue: &'a str,
    room: Option<u32>,
}

/// Which wait of [`wait_for_lock`] failed.
enum Step {
    Room,
    Lock,
}

/// Opens a transaction on `conn` and waits in it for `lock` (its room first,
/// if any), for a transaction of `statements` statements, the waits included.
/// Each of them, and any idle time inside the transaction, is bounded on the
/// server at four fifths of `bound` shared among them (at least 50 ms each;
/// two fifths for a claim in turn without a room): the transaction ends before
/// the caller gives up on it, and a client gone without a word frees the lock
/// after the same time.
async fn wait_for_lock<'c>(
    conn: &'c mut PgConnection,
    lock: Lock<'_>,
    bound: std::time::Duration,
    statements: u32,
    give_up: impl std::future::Future<Output = ()>,
) -> Result<Waited<'c>, Error> {
    // At least 50 ms: a shorter wait would mostly time out and go round again,
    // and the idle bound would end the session between its own statements.
    let share = bound.as_millis() * 4 / (5 * u128::from(statements.max(1)));
    let ms = share.max(50).to_string();
    let mut tx = sqlx::Connection::begin(conn)
        .await
        .map_err(err("job_claim"))?;
    let waited = tokio::select! {
        r = wait_in(&mut tx, lock, &ms) => r,
        () = give_up => return Ok(Waited::GaveUp),
    };
    match waited {
        Ok(()) => Ok(Waited::Holding(tx)),
        Err((_, e)) if super::sqlstate(&e).as_deref() == Some(super::LOCK_NOT_AVAILABLE) => {
            tx.rollback().await.map_err(err("job_claim"))?;
            Ok(Waited::TimedOut)
        }
        Err((Step::Room, e)) if crate::lacks_grant(&e) || crate::names_missing_object(&e) => {
            tx.rollback().await.map_err(err("job_claim"))?;
            Ok(Waited::NoRoom(e))
        }
        Err((_, e)) => Err(e),
    }
}

/// [`wait_for_lock`]'s waits, in the transaction open on `tx`, each statement
/// bounded at `ms` milliseconds; says which failed.
async fn wait_in(tx: &mut PgConnection, lock: Lock<'_>, ms: &str) -> Result<(), (Step, Error)> {
    if let Some(room) = lock.room {
        room::wait_in_room(tx, room, ms)
            .await
            .map_err(|e| (Step::Room, err("job_claim")(e)))?;
    }
    sqlx::query(
        "select pg_advisory_xact_lock($1, hashtext($2))
         from (select set_config('lock_timeout', $3, true),
                      set_config('statement_timeout', $3, true),
                      set_config('idle_in_transaction_session_timeout', $3, true)) as bounds",
    )
    .bind(lock.key)
    .bind(lock.queue)
    .bind(ms)
    .execute(&mut *tx)
    .await
    .map(drop)
    .map_err(|e| (Step::Lock, err("job_claim")(e)))
}

/// `n` fresh random lease tokens (UUID v4) from one read of the OS's random
/// source, for a [`ClaimSpec`]. Minted in Rust rather than by
/// `gen_random_uuid()` in the claim, which cost PostgreSQL about a microsecond
/// per job (a few per cent of a drain); one system call serves a whole claim,
/// where `Uuid::new_v4` would make one per job.
pub fn mint_lease_tokens(n: usize) -> Result<Vec<Uuid>, Error> {
    let mut bytes = vec![0u8; n * 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        err("job_claim")(sqlx::Error::Io(std::io::Error::other(format!(
            "the OS random source failed: {e}"
        ))))
    })?;
    Ok(bytes
        .chunks_exact(16)
        .map(|b| {
            let b: [u8; 16] = b.try_into().expect("chunks of 16");
            uuid::Builder::from_random_bytes(b).into_uuid()
        })
        .collect())
}

/// Which of `queues` have a job a claim would take now (see [`job_claim`]): one
/// read-only statement, an index probe per queue, in place of an empty claim per
/// idle queue. The runtime's poller runs it once a poll interval for every queue
/// waiting for work, so idle polling costs one statement however many queues a
/// runtime serves. `kinds` as for the claim.
pub async fn queues_ready(
    conn: &mut PgConnection,
    queues: &[String],
    kinds: &[String],
) -> Result<Vec<String>, Error> {
    sqlx::query_scalar(concat!(
        "select w.name from unnest($1::text[]) as w(name)
         where exists (select from lq.jobs where ",
        claimable_in!("w.name", "now()"),
        ")"
    ))
    .bind(queues)
    .bind(kinds)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("queues_ready"))
}

#[cfg(test)]
mod tests {
    use super::mint_lease_tokens;

    #[test]
    fn minted_lease_tokens_are_random_v4_uuids_and_distinct() {
        let tokens = mint_lease_tokens(500).unwrap();
        assert_eq!(tokens.len(), 500);
        assert!(tokens.iter().all(|t| t.get_version_num() == 4));
        let distinct: std::collections::HashSet<_> = tokens.iter().collect();
        assert_eq!(distinct.len(), 500);
        assert!(mint_lease_tokens(0).unwrap().is_empty());
    }
}
