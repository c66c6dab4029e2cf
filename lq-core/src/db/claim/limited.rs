//! Claims under a queue's limits across runtimes: a global limit (at most N
//! running at once) and a rate limit (at most N started per period, a token
//! bucket in `lq.rate_limits`, refilled and spent in `rated`).

use sqlx::{PgConnection, Row};

use super::{claim_query, err, wait_for_lock, ClaimSpec, ClaimedJob, Lock, Waited};
use crate::{Error, QueueLimits};
/// The room a queue's global limit (`$7`) leaves (SQL text): a CTE `room`
/// whose `n` is the limit less the queue's running jobs, at least 0, counted
/// once under the statement's snapshot.
macro_rules! global_room_cte {
    () => {
        "room as materialized (
             select greatest(0, $7::int8 - (select count(*) from lq.jobs
                                            where queue = $1 and state = 'running')) as n
         )"
    };
}

/// The rate limit's debit (SQL text): a CTE that takes a token from the
/// queue's bucket for each job `claimed` while `$spend` holds, for a claim
/// whose transaction refilled (and locked) the bucket first.
macro_rules! debit_cte {
    ($spend:literal) => {
        concat!(
            "debit as (
             update lq.rate_limits set tokens = tokens - (select count(*) from claimed)
             where queue = $1 and ",
            $spend,
            "
         )"
        )
    };
}

/// The end of a claim statement that says one more thing than its jobs (SQL
/// text): the claimed rows with a null `$type` column after them, and one
/// more row, with a nil lease token, whose column is `$mark` ([`Marked`]).
macro_rules! claimed_and_mark {
    ($type:literal, $mark:literal) => {
        concat!(
            "         select *, null::",
            $type,
            " as mark from claimed
         union all
         select 0, '', '', 0, 0, '00000000-0000-0000-0000-000000000000'::uuid,
                now(), now(), now(), null, ",
            $mark
        )
    };
}

// After the macros above, which it uses (`claimed_and_mark!`).
mod rated;
use rated::{claim_rated, refill_bucket, wait_for_token, whole_tokens};

/// First key of the advisory lock that makes the claims of a queue with a
/// global limit or a rate limit take turns across every runtime (`lql`; the
/// second key is `hashtext(queue)`), held for one claim's transaction.
pub const GLOBAL_LIMIT_LOCK_KEY: i32 = 0x6c71_6c00;

/// What a claim under a queue's limits ([`job_claim_limited`]) came to.
#[derive(Debug)]
pub enum Limited {
    /// Its turn came and it claimed these jobs (committed), at most the room
    /// the limits left.
    Claimed {
        /// The jobs claimed.
        jobs: Vec<ClaimedJob>,
        /// The global limit, not the queue running dry, stopped the claim:
        /// the queue's running jobs reached it, so ready jobs may be left.
        at_limit: bool,
        /// The rate limit stopped the claim: no whole token was left, and the
        /// next comes after this.
        next_token: Option<std::time::Duration>,
    },
    /// The lock stayed taken past the wait's bound: nothing claimed.
    TimedOut,
    /// The caller gave up while it waited (see [`super::Turn::GaveUp`]): the
    /// connection must be closed, not reused.
    GaveUp,
}

/// [`super::job_claim`] for a queue with [`QueueLimits`]. The claims of the
/// queue take turns on one advisory lock ([`GLOBAL_LIMIT_LOCK_KEY`]); holding
/// it, a claim
/// - under a global limit, counts the queue's running jobs in the claim's own
///   statement, whose snapshot, taken after the lock, holds every earlier
///   claim's commit. A count can only be too high (a job finishing
///   meanwhile), never too low, so the limit is never passed;
/// - under a rate limit, refills the queue's token bucket in `lq.rate_limits`
///   by the database time passed since its last refill (creating it full), and
///   spends a token for each job it claims in the claim's own statement;
///
/// and claims at most the room both leave. Four round trips with a global
/// limit (begin, the lock, the claim, commit), five with both limits, for
/// queues that asked for them; a queue with only a rate limit claims in one
/// statement once its bucket exists (the bucket row locked, refilled, spent and
/// written back with the claim), and in five before.
/// `give_up` works as for [`super::job_claim_in_turn`]; the wait and each
/// statement get an equal share of four fifths of `bound` on the server, so
/// the transaction ends before the caller gives up on it.
pub async fn job_claim_limited(
    conn: &mut PgConnection,
    mut spec: ClaimSpec<'_>,
    limits: QueueLimits,
    bound: std::time::Duration,
    give_up: impl std::future::Future<Output = ()>,
) -> Result<Limited, Error> {
    if let (None, Some(rate)) = (limits.global, limits.rate) {
        if let Some(claimed) = claim_rated(conn, spec, rate).await? {
            return Ok(claimed);
        }
    }
    let statements = 2 + u32::from(limits.rate.is_some());
    let lock = Lock {
        key: GLOBAL_LIMIT_LOCK_KEY,
        queue: spec.queue,
        room: None,
    };
    let mut tx = match wait_for_lock(conn, lock, bound, statements, give_up).await? {
        Waited::Holding(tx) => tx,
        Waited::TimedOut => return Ok(Limited::TimedOut),
        Waited::GaveUp => return Ok(Limited::GaveUp),
        // Only a wait with a room can be refused one.
        Waited::NoRoom(e) => return Err(e),
    };
    let asked = spec.limit;
    let mut tokens = f64::INFINITY;
    if let Some(rate) = limits.rate {
        tokens = refill_bucket(&mut tx, spec.queue, rate).await?;
        spec.limit = asked.min(whole_tokens(tokens));
    }
    // The global limit's room, counted in the claim's own statement (whose
    // snapshot, taken after the lock, holds every earlier claim's commit); a
    // claim the rate limit left no room for is not sent, and does not count.
    let mut global_room = None;
    let jobs = if spec.limit == 0 {
        Vec::new()
    } else if let Some(global) = limits.global {
        // One statement for both cases: without a rate limit, `$8` is false
        // and the debit touches no row.
        let sql = concat!(
            "with ",
            global_room_cte!(),
            ", ",
            claim_ctes!(
                "true",
                "statement_timestamp()",
                "least($3, (select n from room))"
            ),
            ", ",
            debit_cte!("$8"),
            "\n",
            claimed_and_mark!("int8", "(select n from room)")
        );
        let rows: Vec<Marked<i64>> = claim_query(sql, spec)?
            .bind(i64::from(global))
            .bind(limits.rate.is_some())
            .fetch_all(&mut *tx)
            .await
            .map_err(err("job_claim"))?;
        let (jobs, room) = Marked::split(rows);
        global_room = room;
        jobs
    } else {
        let sql = concat!(
            "with ",
            claim_ctes!("true", "statement_timestamp()", "$3"),
            ", ",
            debit_cte!("true"),
            "\n         select * from claimed"
        );
        claim_query(sql, spec)?
            .fetch_all(&mut *tx)
            .await
            .map_err(err("job_claim"))?
    };
    tx.commit().await.map_err(err("job_claim"))?;
    let got = jobs.len() as i64;
    // A claim that took all the room a limit left, when that was no more than
    // it asked, was stopped by that limit; one that got fewer found the queue dry.
    let at_limit = global_room.is_some_and(|room| got == room && room <= asked);
    let next_token = limits
        .rate
        .and_then(|rate| wait_for_token(rate, tokens, got, asked));
    Ok(Limited::Claimed {
        jobs,
        at_limit,
        next_token,
    })
}

/// A row of a claim statement that ends in [`claimed_and_mark!`]: a claimed
/// job, or (with a nil lease token, which no claimed job has) the one row that
/// carries the statement's mark in its last column.
struct Marked<T> {
    job: ClaimedJob,
    mark: Option<T>,
}

impl<T> Marked<T> {
    /// The claimed jobs, in order, and the mark (`None` if it was null).
    fn split(rows: Vec<Self>) -> (Vec<ClaimedJob>, Option<T>) {
        let mut jobs = Vec::with_capacity(rows.len());
        let mut mark = None;
        for Marked { job, mark: m } in rows {
            if job.lease_token.is_nil() {
                mark = m;
            } else {
                jobs.push(job);
            }
        }
        (jobs, mark)
    }
}

impl<'r, T> sqlx::FromRow<'r, sqlx::postgres::PgRow> for Marked<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    fn from_row(row: &'r sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        Ok(Self {
            job: <ClaimedJob as sqlx::FromRow<_>>::from_row(row)?,
            mark: row.try_get(super::CLAIMED_COLUMNS.len())?,
        })
    }
}
