-- litequeue schema, version 8: lq.jobs's invariants checked without per-statement cost.
--
-- A check constraint is rebuilt from its stored expression at the start of every
-- statement that writes the table, so a one-row insert paid for lq.jobs's three
-- checks in full: about 9 of its 22 microseconds of server time. Two of them move
-- into types, whose checks PostgreSQL prepares once per session (about 6
-- microseconds saved; bench/FINDINGS.md, "Stop 33"): the state column takes an
-- enum of the two live states (a queue row can be nothing else; finished jobs
-- live in lq.finished_jobs), and max_attempts a domain over integer that refuses
-- values below 1. The lease check stays a constraint.
--
-- Casts between the two enums keep statements written against lq.job_state
-- working: a live state reads as a job state anywhere (implicit), and a job state
-- may be assigned to the column (it fails, as the check did, for a final state).
--
-- The column changes rewrite lq.jobs and rebuild its indexes under an exclusive
-- lock, so claims and enqueues wait until the migration commits: 7.2 s for 2
-- million queued jobs (739 MB) on the 2-core benchmark host. On a large backlog
-- migrate while the queue is quiet; a rewrite that outlasts migrate()'s
-- two-minute bound (some 30 million jobs at that rate) is rolled back.

create type lq.live_state as enum ('queued', 'running');
create domain lq.attempt_limit as integer
    constraint attempt_limit_at_least_one check (value >= 1);
create cast (lq.live_state as lq.job_state) with inout as implicit;
create cast (lq.job_state as lq.live_state) with inout as assignment;

-- lq.all_jobs reads the two columns. It is replaced in place, not dropped, so the
-- grants on it (docs/roles.md) and any view built on it survive: first with
-- stand-ins for the two columns, then, once they have their new types, as before.
create or replace view lq.all_jobs as
    select id, kind, queue, priority, payload, 'queued'::lq.job_state as state, run_at, attempts,
           0 as max_attempts, unique_key,
           lease_token, lease_owner, lease_expires_at, cancel_requested_at, errors, created_at,
           started_at, finished_at, meta
    from lq.jobs
    union all
    select id, kind, queue, priority, payload, state, run_at, attempts, max_attempts, unique_key,
           null, lease_owner, null, cancel_requested_at, errors, created_at,
           started_at, finished_at, meta
    from lq.finished_jobs;

drop index lq.jobs_pickup;
drop index lq.jobs_lease_expiry;
alter table lq.jobs
    drop constraint jobs_live_only,
    drop constraint jobs_max_attempts_check,
    drop constraint jobs_lease_iff_running,
    alter column state drop default,
    alter column state type lq.live_state using state::text::lq.live_state,
    alter column state set default 'queued',
    alter column max_attempts type lq.attempt_limit,
    add constraint jobs_lease_iff_running check (
        (state = 'running') = (lease_token is not null and lease_expires_at is not null));

create index jobs_pickup on lq.jobs (queue, priority desc, run_at, id) where state = 'queued';
create index jobs_lease_expiry on lq.jobs (lease_expires_at) where state = 'running';

create or replace view lq.all_jobs as
    select id, kind, queue, priority, payload, state::lq.job_state as state, run_at, attempts,
           max_attempts::integer as max_attempts, unique_key,
           lease_token, lease_owner, lease_expires_at, cancel_requested_at, errors, created_at,
           started_at, finished_at, meta
    from lq.jobs
    union all
    select id, kind, queue, priority, payload, state, run_at, attempts, max_attempts, unique_key,
           null, lease_owner, null, cancel_requested_at, errors, created_at,
           started_at, finished_at, meta
    from lq.finished_jobs;
