//! Claims under a queue's limits across runtimes: a global limit (at most N
//! running at once) and a rate limit (at most N started per period, a token
//! bucket in `lq.rate_limits`).

use sqlx::{PgConnection, Row};

use super::{claim_query, enough_tokens, err, wait_for_lock, ClaimSpec, ClaimedJob, Waited};
use crate::{Error, QueueLimits, RateLimit};

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
/// - under a global limit, counts the queue's running jobs in a statement
///   whose snapshot holds every earlier claim's commit. A count can only be too
///   high (a job finishing meanwhile), never too low, so the limit is never
///   passed;
/// - under a rate limit, refills the queue's token bucket in `lq.rate_limits`
///   by the database time passed since its last refill (creating it full), and
///   spends a token for each job it claims in the claim's own statement;
///
/// and claims at most the room both leave. Five round trips with one limit, six
/// with both, for queues that asked for them; a queue with only a rate limit
/// claims in one statement once its bucket exists (the bucket row locked,
/// refilled, spent and written back with the claim).
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
    let statements = 2 + u32::from(limits.global.is_some()) + u32::from(limits.rate.is_some());
    let mut tx = match wait_for_lock(
        conn,
        GLOBAL_LIMIT_LOCK_KEY,
        spec.queue,
        bound,
        statements,
        give_up,
    )
    .await?
    {
        Waited::Holding(tx) => tx,
        Waited::TimedOut => return Ok(Limited::TimedOut),
        Waited::GaveUp => return Ok(Limited::GaveUp),
    };
    let asked = spec.limit;
    let mut global_room = i64::MAX;
    if let Some(global) = limits.global {
        let running: i64 = sqlx::query_scalar(
            "select count(*) from lq.jobs where queue = $1 and state = 'running'",
        )
        .bind(spec.queue)
        .fetch_one(&mut *tx)
        .await
        .map_err(err("job_claim"))?;
        global_room = i64::from(global).saturating_sub(running).max(0);
    }
    let mut tokens = f64::INFINITY;
    if let Some(rate) = limits.rate {
        tokens = refill_bucket(&mut tx, spec.queue, rate).await?;
    }
    // Whole tokens only; at most `allowed` (a bucket's size), so the cast holds.
    let rate_room = if tokens.is_finite() {
        tokens.floor() as i64
    } else {
        i64::MAX
    };
    spec.limit = asked.min(global_room).min(rate_room);
    let jobs = if spec.limit == 0 {
        Vec::new()
    } else if limits.rate.is_some() {
        let sql = concat!(
            "with ",
            claim_ctes!("true", "statement_timestamp()", "$3"),
            ",
         debit as (
             update lq.rate_limits set tokens = tokens - (select count(*) from claimed)
             where queue = $1
         )
         select * from claimed"
        );
        claim_query(sql, spec)?
            .fetch_all(&mut *tx)
            .await
            .map_err(err("job_claim"))?
    } else {
        let sql = concat!("with ", claim_statement!("true", "statement_timestamp()"));
        claim_query(sql, spec)?
            .fetch_all(&mut *tx)
            .await
            .map_err(err("job_claim"))?
    };
    tx.commit().await.map_err(err("job_claim"))?;
    let got = jobs.len() as i64;
    // A claim that took all the room a limit left, when that was no more than
    // it asked, was stopped by that limit; one that got fewer found the queue dry.
    let at_limit = got == global_room && global_room <= asked;
    let next_token = match limits.rate {
        Some(rate) if got == rate_room && rate_room <= asked => {
            Some(rate.until_next_token(tokens - got as f64))
        }
        _ => None,
    };
    Ok(Limited::Claimed {
        jobs,
        at_limit,
        next_token,
    })
}

/// A claim on a queue with a rate limit and no global limit, in one statement
/// (one round trip, where [`job_claim_limited`]'s path takes five): it locks the
/// queue's bucket row (the claims of the queue take turns on it), refills it by
/// the time since its last refill, claims at most its whole tokens, and writes
/// the bucket back less one token a job claimed. `None` when the queue has no
/// bucket yet: nothing was claimed, and the caller takes the path that creates
/// it (a bucket created here would not be locked against a concurrent claim
/// creating its own).
///
/// Its snapshot is taken before the wait for the row, so it may meet rows the
/// previous claim took; `for update skip locked` rechecks each and skips them
/// (see `claim_statement!`), which a claim that takes turns on a lock before
/// its statement avoids. Claims of a rated queue are few (one per token
/// refilled, at most), so the saved round trips weigh more.
async fn claim_rated(
    conn: &mut PgConnection,
    spec: ClaimSpec<'_>,
    rate: RateLimit,
) -> Result<Option<Limited>, Error> {
    enough_tokens(&spec)?;
    let sql = concat!(
        "with bucket as materialized (
             select least($7::int4::float8,
                          b.tokens + greatest(0, extract(epoch from statement_timestamp() - b.updated_at)::float8)
                                     * $7::int4 / $8::float8) as tokens,
                    greatest(b.updated_at, statement_timestamp()) as refilled_at
             from lq.rate_limits b where b.queue = $1
             for update
         ), ",
        claim_ctes!(
            "true",
            "statement_timestamp()",
            "least($3, coalesce((select floor(tokens)::int8 from bucket), 0))"
        ),
        ",
         debit as (
             update lq.rate_limits
             set tokens = (select tokens from bucket) - (select count(*) from claimed),
                 allowed = $7, period_secs = $8, updated_at = (select refilled_at from bucket)
             where queue = $1
         )
         select *, null::float8 as bucket from claimed
         union all
         select 0, '', '', 0, 0, '00000000-0000-0000-0000-000000000000'::uuid,
                now(), now(), now(), null, (select tokens from bucket)"
    );
    let rows = sqlx::query(sql)
        .bind(spec.queue)
        .bind(spec.kinds)
        .bind(spec.limit)
        .bind(spec.owner)
        .bind(spec.lease_secs)
        .bind(spec.tokens)
        .bind(i32::try_from(rate.allowed()).unwrap_or(i32::MAX))
        .bind(rate.period().as_secs_f64())
        .fetch_all(&mut *conn)
        .await
        .map_err(err("job_claim"))?;
    let mut jobs = Vec::with_capacity(rows.len());
    let mut bucket = None;
    for row in &rows {
        let job = <ClaimedJob as sqlx::FromRow<_>>::from_row(row).map_err(err("job_claim"))?;
        // The last row says what the bucket held (null: no bucket), with a nil
        // lease token, which no claimed job has.
        if job.lease_token.is_nil() {
            bucket = row
                .try_get::<Option<f64>, _>(10)
                .map_err(err("job_claim"))?;
        } else {
            jobs.push(job);
        }
    }
    let Some(tokens) = bucket else {
        return Ok(None);
    };
    // Whole tokens only; at most `allowed`, so the cast holds.
    let room = tokens.floor() as i64;
    let got = jobs.len() as i64;
    let next_token =
        (got == room && room <= spec.limit).then(|| rate.until_next_token(tokens - got as f64));
    Ok(Some(Limited::Claimed {
        jobs,
        at_limit: false,
        next_token,
    }))
}

/// Refills `queue`'s token bucket by the database time passed since its last
/// refill, at `rate`, up to its size (a bucket not there yet starts full), and
/// returns the tokens it holds. The row stays locked until the transaction
/// ends, and records `rate` for operators to see. `updated_at` never moves
/// back: a refill whose statement began before the previous one's (it waited
/// for the row) adds nothing, and counts the time from the later one.
async fn refill_bucket(tx: &mut PgConnection, queue: &str, rate: RateLimit) -> Result<f64, Error> {
    sqlx::query_scalar(
        "insert into lq.rate_limits as b (queue, tokens, allowed, period_secs, updated_at)
         values ($1, $2::int4::float8, $2::int4, $3::float8, statement_timestamp())
         on conflict (queue) do update
         set tokens = least(excluded.allowed::float8,
                            b.tokens + greatest(0, extract(epoch from statement_timestamp() - b.updated_at)::float8)
                                       * excluded.allowed / excluded.period_secs),
             allowed = excluded.allowed,
             period_secs = excluded.period_secs,
             updated_at = greatest(b.updated_at, statement_timestamp())
         returning tokens",
    )
    .bind(queue)
    .bind(i32::try_from(rate.allowed()).unwrap_or(i32::MAX))
    .bind(rate.period().as_secs_f64())
    .fetch_one(&mut *tx)
    .await
    .map_err(err("job_claim"))
}
