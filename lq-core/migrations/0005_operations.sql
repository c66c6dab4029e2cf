-- litequeue schema, version 5: what operators and their tools need.
--
-- Additive only: a runtime built for version 4 keeps working against it, so a
-- rolling deploy may migrate first and replace workers afterwards.

-- Free-form metadata per job: the cron tick a recurring job stands for, trace
-- context, user tags. Null for most jobs, which stores nothing.
alter table lq.jobs add column meta jsonb;
alter table lq.finished_jobs add column meta jsonb;

create or replace view lq.all_jobs as
    select id, kind, queue, priority, payload, state, run_at, attempts, max_attempts, unique_key,
           lease_token, lease_owner, lease_expires_at, cancel_requested_at, errors, created_at,
           started_at, finished_at, meta
    from lq.jobs
    union all
    select id, kind, queue, priority, payload, state, run_at, attempts, max_attempts, unique_key,
           null, lease_owner, null, cancel_requested_at, errors, created_at,
           started_at, finished_at, meta
    from lq.finished_jobs;

-- Queues an operator has acted on. A queue without a row, or with a null
-- paused_at, is active; the claim skips a paused queue, in every runtime, at once.
create table lq.queues (
    name       text        primary key,
    paused_at  timestamptz,
    -- who paused it, as the operator's tool recorded it
    paused_by  text,
    updated_at timestamptz not null default now()
);

-- Runtimes alive now, one row each, written by the runtime at start and by its
-- heartbeat. A row whose expires_at has passed belongs to a runtime that died
-- without saying so; the leader deletes it.
create table lq.runtimes (
    id           text        primary key,
    host         text        not null,
    pid          integer     not null,
    version      text        not null,
    -- {"queue": concurrency, ...}
    queues       jsonb       not null,
    -- every kind this runtime has a handler for
    kinds        text[]      not null,
    started_at   timestamptz not null default now(),
    heartbeat_at timestamptz not null default now(),
    expires_at   timestamptz not null
);

-- The maintenance leader: at most one runtime at a time holds this lease, renews
-- it by database time, and runs rescue, prune, vacuum, burial of unknown kinds
-- and cron scheduling. Another runtime takes it once expires_at has passed.
create table lq.leader (
    name       text        primary key default 'maintenance',
    holder     text        not null,
    elected_at timestamptz not null default now(),
    expires_at timestamptz not null
);

-- Cron schedules describe themselves, so tools without the application's types
-- can show them and their next fire time. Written by the leader from the
-- job types it knows; null until then.
alter table lq.cron_schedules
    add column expr     text,
    add column tz       text,
    add column catch_up text,
    add column queue    text,
    add column declared_by text;
