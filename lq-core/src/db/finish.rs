//! Fenced writes that end an attempt. Each matches `(id, lease_token)` on a running
//! row, so a worker that lost its lease changes nothing and learns it.
//!
//! A job whose cancellation was requested while it ran ends `cancelled` whatever
//! its handler returned. A job that ends moves to `lq.finished_jobs` in the same
//! statement (`archive_moved!`); one that goes back to the queue stays in `lq.jobs`.
//! Where a statement may do either, the choice is made in a first step that locks
//! the row (so reads its newest version), and the two writes follow that choice.
//!
//! A held job is found by its id and lease, not its `state`: the table's check
//! constraint makes a lease token and expiry the same as "running", and a
//! `state` test would let the planner read the running rows' partial index
//! whole (with statistics that call the table empty, it did:
//! `tests/integration/planned_when_empty.rs`).

use sqlx::PgConnection;
use uuid::Uuid;

use super::err;
use crate::{storable_error, Error, JobState};

/// The rest of a hand-back after [`held_rows!`]: each held job back in the queue
/// with its attempt unspent, or `cancelled` when a cancel was requested; returns
/// the ids written.
macro_rules! release_held {
    // Each job's id and kind: the kind read back from the row as the statement's
    // snapshot has it (a statement does not see its own writes).
    (with kinds) => {
        concat!(
            release_held!(@writes),
            "
         select u.id, j.kind from (select id from requeued union all select id from archived) u
         join lq.jobs j on ",
            job_by_id_of!("u.id")
        )
    };
    () => {
        concat!(
            release_held!(@writes),
            "
         select id from requeued union all select id from archived"
        )
    };
    (@writes) => {
        concat!(
            "
         cur as (
             select id,
                 case when cancel_requested then 'cancelled' else 'queued' end::lq.job_state as next,
                 null::jsonb as next_errors
             from held
         ),
         ",
            requeue_or_end!("attempts = j.attempts - 1,")
        )
    };
}

/// The success statement's first step: the fenced delete, and each job's final
/// state (`cancelled` when a cancel was requested meanwhile).
macro_rules! complete_moved {
    () => {
        concat!(
            "with moved as (
             delete from lq.jobs j
             using rows from (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::uuid[])) as fence(id, token)
             where ",
            job_by_id_of!("fence.id"),
            " and j.lease_token = fence.token
             returning j.*,
                 case when j.cancel_requested_at is not null then 'cancelled' else 'succeeded' end::lq.job_state
                     as final_state,
                 j.errors as final_errors
         ),
         "
        )
    };
}

const COMPLETE_MANY: &str = concat!(
    complete_moved!(),
    archive_moved_fast!(),
    "
         returning id
     )
     select id from archived"
);

/// [`COMPLETE_MANY`] that skips the rows another session holds locked instead of
/// waiting for them: the fallback after a batch waited too long for one.
const COMPLETE_MANY_UNLOCKED: &str = concat!(
    "with picked as materialized (
         select j.id from lq.jobs j
         join rows from (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::uuid[])) as fence(id, token)
           on ",
    job_by_id_of!("fence.id"),
    " and j.lease_token = fence.token
         for update of j skip locked
     ),
     moved as (
         delete from lq.jobs j
         using picked
         where ",
    job_by_id_of!("picked.id"),
    "
         returning j.*,
             case when j.cancel_requested_at is not null then 'cancelled' else 'succeeded' end::lq.job_state
                 as final_state,
             j.errors as final_errors
     ),
     ",
    archive_moved_fast!(),
    "
         returning id
     )
     select id from archived"
);

const COMPLETE_MANY_REPLACING: &str = concat!(
    complete_moved!(),
    archive_moved!(),
    "
     select id from archived"
);

/// Marks many jobs succeeded in one statement; returns the ids whose lease still held.
///
/// One delete, fenced by each `(id, lease_token)` pair, with no locking step before
/// it: the delete takes each row's lock itself, and after waiting for a concurrent
/// write (a cancel request, a heartbeat) it re-checks the fence on the row's newest
/// version and returns that version, so a cancellation requested meanwhile still
/// ends the job `cancelled`. A separate `for update` step cost a lock record per
/// job in the WAL. The pairs are joined row by row (`unnest`), not tested with
/// `lease_token = any(tokens)`, which compared each row's token with the whole
/// batch's. Rows are locked in id order, like every other multi-row write: the
/// pairs are sorted by id here and the primary key is probed in that order,
/// one probe a pair whatever the table's statistics say (`job_by_id_of!`). No
/// `state` test is needed: the table's check constraint makes "has a lease
/// token" the same as "running" (a test would let the planner pick the partial
/// running-rows index from stale statistics). Like the claim, it is written to be
/// run with a generic plan (the runtime's hot-path connections force one).
pub async fn job_complete_many(
    conn: &mut PgConnection,
    ids: &[i64],
    tokens: &[Uuid],
) -> Result<Vec<i64>, Error> {
    complete(conn, COMPLETE_MANY, "job_complete_many", ids, tokens).await
}

/// [`job_complete_many`] for the rows no other session holds locked, without
/// waiting for the others (`for update skip locked`, which costs a lock record
/// per row in the WAL, so it is only the fallback): returns the ids written. A
/// row not written was either locked elsewhere or its lease lost;
/// [`super::lease::job_leases_still_held`] tells which.
pub async fn job_complete_unlocked(
    conn: &mut PgConnection,
    ids: &[i64],
    tokens: &[Uuid],
) -> Result<Vec<i64>, Error> {
    complete(
        conn,
        COMPLETE_MANY_UNLOCKED,
        "job_complete_unlocked",
        ids,
        tokens,
    )
    .await
}

/// [`job_complete_many`] whose move to the history overwrites a row already there
/// with the same id (see `archive_moved!`): the fallback after the plain insert
/// was refused, one job at a time.
pub async fn job_complete_many_replacing(
    conn: &mut PgConnection,
    ids: &[i64],
    tokens: &[Uuid],
) -> Result<Vec<i64>, Error> {
    complete(
        conn,
        COMPLETE_MANY_REPLACING,
        "job_complete_many_replacing",
        ids,
        tokens,
    )
    .await
}

/// Runs one of the success statements on the `(id, token)` pairs, in id order;
/// returns the ids it wrote.
async fn complete(
    conn: &mut PgConnection,
    sql: &'static str,
    op: &'static str,
    ids: &[i64],
    tokens: &[Uuid],
) -> Result<Vec<i64>, Error> {
    let (ids, tokens) = by_id(ids, tokens);
    sqlx::query_scalar(sql)
        .bind(ids)
        .bind(tokens)
        .fetch_all(&mut *conn)
        .await
        .map_err(err(op))
}

/// The `(id, token)` pairs sorted by id, as two arrays: the order the success
/// statements lock their rows in.
fn by_id(ids: &[i64], tokens: &[Uuid]) -> (Vec<i64>, Vec<Uuid>) {
    let mut pairs: Vec<(i64, Uuid)> = ids.iter().copied().zip(tokens.iter().copied()).collect();
    pairs.sort_unstable_by_key(|&(id, _)| id);
    pairs.into_iter().unzip()
}

/// Ends a job `dead` with `reason` as its only error, dropping its earlier
/// history: the last resort when every other write of its outcome was refused
/// (the history may be what the database refuses). Fenced by `token`; without
/// one, only a running job whose lease expired is ended (the rescuer's case).
/// Returns whether the job was ended.
pub async fn job_quarantine(
    conn: &mut PgConnection,
    id: i64,
    token: Option<Uuid>,
    reason: &str,
) -> Result<bool, Error> {
    let ended: Option<i64> = sqlx::query_scalar(concat!(
        "with moved as (
             delete from lq.jobs j
             where j.id = $1
               and case when $2::uuid is null then j.lease_expires_at < now() and j.lease_token is not null
                        else j.lease_token = $2 end
             returning j.*, 'dead'::lq.job_state as final_state,
                 jsonb_build_array(jsonb_build_object('attempt', j.attempts, 'at', now(),
                     'worker', j.lease_owner, 'error', $3::text)) as final_errors
         ),
         ",
        archive_moved!(),
        "
         select id from archived"
    ))
    .bind(id)
    .bind(token)
    .bind(storable_error(reason).as_ref())
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_quarantine"))?;
    Ok(ended.is_some())
}

/// Records a failed attempt. With `retry_in_secs`, the job is queued again after
/// that delay unless its attempts are spent; without it, the job is dead now.
/// Returns the new state, or `None` when the lease was lost.
pub async fn job_fail(
    conn: &mut PgConnection,
    id: i64,
    token: Uuid,
    error: &str,
    retry_in_secs: Option<f64>,
) -> Result<Option<JobState>, Error> {
    sqlx::query_scalar(concat!(
        "with cur as materialized (
             select id,
                 case when cancel_requested_at is not null then 'cancelled'
                      when $4::float8 is null or attempts >= max_attempts then 'dead'
                      else 'queued' end::lq.job_state as next,
                 ",
        append_error!("errors", "attempts", "lease_owner", "$3::text"),
        " as next_errors
             from lq.jobs
             where id = $1 and lease_token = $2 and lease_expires_at is not null
             for update
         ),
         ",
        requeue_or_end!("run_at = now() + make_interval(secs => $4),"),
        "
         select state from requeued union all select state from archived"
    ))
    .bind(id)
    .bind(token)
    .bind(storable_error(error).as_ref())
    .bind(retry_in_secs)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_fail"))
}

/// Requeues a job after `delay_secs` and gives back its attempt; a job whose
/// cancellation was requested ends `cancelled` instead. `None` when the lease was lost.
pub async fn job_snooze(
    conn: &mut PgConnection,
    id: i64,
    token: Uuid,
    delay_secs: f64,
) -> Result<Option<JobState>, Error> {
    sqlx::query_scalar(concat!(
        "with cur as materialized (
             select id,
                 case when cancel_requested_at is null then 'queued' else 'cancelled' end::lq.job_state as next,
                 null::jsonb as next_errors
             from lq.jobs
             where id = $1 and lease_token = $2 and lease_expires_at is not null
             for update
         ),
         ",
        requeue_or_end!("run_at = now() + make_interval(secs => $3), attempts = j.attempts - 1,"),
        "
         select state from requeued union all select state from archived"
    ))
    .bind(id)
    .bind(token)
    .bind(delay_secs)
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_snooze"))
}

/// Ends a job `cancelled` at its handler's request. `false` when the lease was lost.
pub async fn job_cancel_own(
    conn: &mut PgConnection,
    id: i64,
    token: Uuid,
    reason: &str,
) -> Result<bool, Error> {
    let ended: Option<i64> = sqlx::query_scalar(concat!(
        "with moved as (
             delete from lq.jobs j
             where id = $1 and lease_token = $2 and lease_expires_at is not null
             returning j.*, 'cancelled'::lq.job_state as final_state,
                 ",
        append_error!("j.errors", "j.attempts", "j.lease_owner", "$3::text"),
        " as final_errors
         ),
         ",
        archive_moved!(),
        "
         select id from archived"
    ))
    .bind(id)
    .bind(token)
    .bind(storable_error(reason).as_ref())
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_cancel_own"))?;
    Ok(ended.is_some())
}

/// Hands unfinished jobs back to the queue, giving back their attempt: at
/// shutdown, or a job claimed ahead that waited too long for a handler.
/// They keep their `run_at`, and so their place in the queue; one whose
/// cancellation was requested ends `cancelled`. Returns the ids released or ended.
pub async fn job_release_many(
    conn: &mut PgConnection,
    ids: &[i64],
    tokens: &[Uuid],
) -> Result<Vec<i64>, Error> {
    sqlx::query_scalar(concat!(held_rows!(), ",", release_held!()))
        .bind(ids)
        .bind(tokens)
        .fetch_all(&mut *conn)
        .await
        .map_err(err("job_release_many"))
}

/// Of the attempts `(ids[i], attempts[i])` whose success write seemed not to
/// land, those the history shows ended by `owner`'s write: a success sent again
/// after its answer was lost finds its row gone, as if the lease had been lost.
/// An attempt's number is counted at claim, so a later attempt (after a lease
/// really lost) never matches; a job the rescuer ended `dead` does not either.
pub async fn job_successes_in_history(
    conn: &mut PgConnection,
    ids: &[i64],
    attempts: &[i32],
    owner: &str,
) -> Result<Vec<i64>, Error> {
    sqlx::query_scalar(
        "select h.id from lq.finished_jobs h
         join rows from (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::int[])) as s(id, attempt)
           on h.id = s.id and h.attempts = s.attempt
         where h.lease_owner = $3 and h.state in ('succeeded', 'cancelled')",
    )
    .bind(ids)
    .bind(attempts)
    .bind(owner)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("job_successes_in_history"))
}

/// The jobs a claim leased with any of `tokens`, handed back as
/// [`job_release_many`] hands jobs back (their attempt unspent); returns their
/// ids with their kinds, which the claimer never heard, for its counts.
///
/// For a claim that got no answer (its connection broke, or its bound ran out,
/// as the commit went through): the claimer minted the tokens, so it can find
/// the jobs it may have leased without knowing their ids. Running rows only,
/// through the running rows' index, so a large backlog costs nothing; nothing
/// matches when the claim did not commit.
pub async fn job_release_unanswered(
    conn: &mut PgConnection,
    tokens: &[Uuid],
) -> Result<Vec<(i64, String)>, Error> {
    sqlx::query_as(concat!(
        held_rows!(where "j.state = 'running' and j.lease_token = any($1::uuid[])"),
        ",",
        release_held!(with kinds)
    ))
    .bind(tokens)
    .fetch_all(&mut *conn)
    .await
    .map_err(err("job_release_unanswered"))
}

/// Whether a failure's outcome that `owner` wrote for attempt `attempt` of job
/// `id` landed though its answer was lost, and the state it wrote: sent again,
/// such a write finds the lease gone, as if it had been lost.
///
/// `error` is the text a failure ([`job_fail`]) or a cancel ([`job_cancel_own`])
/// stored: only that write adds an entry with this attempt, worker and text.
/// A write that ended the job shows as that entry stamped with the history row's
/// `finished_at` (one statement's `now()`); an entry anywhere else means the
/// write queued the job again, whatever became of it since. `None` stands for a
/// snooze ([`job_snooze`]), which adds no entry and gives its attempt back: it
/// landed when the job is still there and no rescue of this attempt is recorded
/// (a lease really lost is rescued, which adds that entry). `None` when the
/// write did not land, or the job is gone (deleted, pruned).
pub async fn job_outcome_landed(
    conn: &mut PgConnection,
    id: i64,
    attempt: i32,
    owner: &str,
    error: Option<&str>,
) -> Result<Option<JobState>, Error> {
    sqlx::query_scalar(concat!(
        "with r as (
             select true as live, 'queued'::lq.job_state as state, attempts, errors,
                 null::timestamptz as finished_at
             from lq.jobs where id = $1
             union all
             select false, state, attempts, errors, finished_at
             from lq.finished_jobs where id = $1
         ),
         mark as (
             select jsonb_build_object('attempt', $2::int, 'worker', $3::text, 'error', $4::text)
                     as written,
                 jsonb_build_object('attempt', $2::int, 'worker', $3::text, 'error', ",
        lease_expired_error!("$3::text"),
        ") as rescued
         )
         select case
             when r.live then 'queued'::lq.job_state
             when $4::text is null and r.attempts = $2 - 1 then r.state
             when r.errors -> -1 @> mark.written
                  and (r.errors -> -1 ->> 'at')::timestamptz = r.finished_at then r.state
             else 'queued'::lq.job_state end
         from r, mark
         where case when $4::text is null
                    then r.attempts >= $2 - 1 and not r.errors @> jsonb_build_array(mark.rescued)
                    else r.errors @> jsonb_build_array(mark.written) end"
    ))
    .bind(id)
    .bind(attempt)
    .bind(owner)
    .bind(error.map(storable_error).as_deref())
    .fetch_optional(&mut *conn)
    .await
    .map_err(err("job_outcome_landed"))
}
