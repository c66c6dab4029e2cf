//! The rate limit's token bucket: its refill, and the claim of a queue with a
//! rate limit alone in one statement.

use sqlx::PgConnection;

use super::super::{claim_query, err, ClaimSpec};
use super::{Limited, Marked};
use crate::{Error, RateLimit};

/// A token bucket refilled (SQL text): the `$tokens` it held at `$at`, plus
/// `$allowed` per `$period` seconds of database time since (none if `$at` is
/// later than this statement), up to `$allowed`. Both rate-limited claim paths
/// refill with it, so they cannot disagree.
macro_rules! refilled {
    ($tokens:literal, $at:literal, $allowed:literal, $period:literal) => {
        concat!(
            "least((",
            $allowed,
            ")::float8, ",
            $tokens,
            " + greatest(0, extract(epoch from statement_timestamp() - ",
            $at,
            ")::float8) * ",
            $allowed,
            " / ",
            $period,
            ")"
        )
    };
}

/// When a bucket's time was last counted after a refill by [`refilled!`]
/// (SQL text): never earlier than `$at`, so a refill whose statement began
/// before the previous one's (it waited for the row) adds nothing.
macro_rules! refilled_at {
    ($at:literal) => {
        concat!("greatest(", $at, ", statement_timestamp())")
    };
}

/// The jobs a bucket holding `tokens` lets a claim take: its whole tokens.
/// A bucket holds at most its size, an `i32`, so the cast holds.
pub(super) fn whole_tokens(tokens: f64) -> i64 {
    tokens.floor() as i64
}

/// When a claim that asked for `asked` jobs and got `got` from a bucket that
/// held `tokens` was stopped by the rate limit, not by the queue running dry:
/// it took every whole token, and they were no more than it asked. Then the
/// claimer should come back when the next token is due, which this returns.
pub(super) fn wait_for_token(
    rate: RateLimit,
    tokens: f64,
    got: i64,
    asked: i64,
) -> Option<std::time::Duration> {
    let room = whole_tokens(tokens);
    (got == room && room <= asked).then(|| rate.until_next_token(tokens - got as f64))
}

/// A claim on a queue with a rate limit and no global limit, in one statement
/// (one round trip, where [`super::job_claim_limited`]'s path takes five): it locks the
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
pub(super) async fn claim_rated(
    conn: &mut PgConnection,
    spec: ClaimSpec<'_>,
    rate: RateLimit,
) -> Result<Option<Limited>, Error> {
    let sql = concat!(
        "with bucket as materialized (
             select ",
        refilled!("b.tokens", "b.updated_at", "$7::int4", "$8::float8"),
        " as tokens, ",
        refilled_at!("b.updated_at"),
        " as refilled_at
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
",
        claimed_and_mark!("float8", "(select tokens from bucket)")
    );
    let rows: Vec<Marked<f64>> = claim_query(sql, spec)?
        .bind(i32::try_from(rate.allowed()).unwrap_or(i32::MAX))
        .bind(rate.period().as_secs_f64())
        .fetch_all(&mut *conn)
        .await
        .map_err(err("job_claim"))?;
    // The mark says what the bucket held (null: no bucket).
    let (jobs, bucket) = Marked::split(rows);
    let Some(tokens) = bucket else {
        return Ok(None);
    };
    let next_token = wait_for_token(rate, tokens, jobs.len() as i64, spec.limit);
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
pub(super) async fn refill_bucket(
    tx: &mut PgConnection,
    queue: &str,
    rate: RateLimit,
) -> Result<f64, Error> {
    sqlx::query_scalar(concat!(
        "insert into lq.rate_limits as b (queue, tokens, allowed, period_secs, updated_at)
         values ($1, $2::int4::float8, $2::int4, $3::float8, statement_timestamp())
         on conflict (queue) do update
         set tokens = ",
        refilled!(
            "b.tokens",
            "b.updated_at",
            "excluded.allowed",
            "excluded.period_secs"
        ),
        ",
             allowed = excluded.allowed,
             period_secs = excluded.period_secs,
             updated_at = ",
        refilled_at!("b.updated_at"),
        "
         returning tokens"
    ))
    .bind(queue)
    .bind(i32::try_from(rate.allowed()).unwrap_or(i32::MAX))
    .bind(rate.period().as_secs_f64())
    .fetch_one(&mut *tx)
    .await
    .map_err(err("job_claim"))
}
