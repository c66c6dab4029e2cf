-- litequeue schema, version 1: the jobs table and its indexes.
-- Applied by lq_runtime::migrate(&pool) inside one transaction under an advisory lock.

create type lq.job_state as enum ('queued', 'running', 'succeeded', 'dead', 'cancelled');

create table lq.jobs (
    id               bigint generated always as identity primary key,
    kind             text        not null,
    queue            text        not null,
    priority         smallint    not null default 0,
    payload          jsonb       not null,
    state            lq.job_state not null default 'queued',
    run_at           timestamptz not null default now(),
    attempts         integer     not null default 0,
    max_attempts     integer     not null check (max_attempts >= 1),
    unique_key       text,
    lease_token      uuid,
    lease_owner      text,
    lease_expires_at timestamptz,
    -- set by a cancel request while the job runs; its worker sees it and stops
    cancel_requested_at timestamptz,
    -- one object per failed attempt: {"attempt", "at", "error"}
    errors           jsonb       not null default '[]',
    created_at       timestamptz not null default now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    -- a lease token exists exactly while the job runs: fenced writes that match a
    -- token therefore only ever touch running rows
    constraint jobs_lease_iff_running check (
        (state = 'running') = (lease_token is not null and lease_expires_at is not null))
);

-- Pickup: only queued rows, in exactly the claim's order.
create index jobs_pickup on lq.jobs (queue, priority desc, run_at, id) where state = 'queued';

-- At most one live job per unique key (guarantee 5).
create unique index jobs_unique_live on lq.jobs (unique_key)
    where unique_key is not null and state in ('queued', 'running');

-- Rescue of expired leases scans only running rows.
create index jobs_lease_expiry on lq.jobs (lease_expires_at) where state = 'running';

-- Pruning finds old finished rows without scanning the history.
create index jobs_finished on lq.jobs (finished_at) where state in ('succeeded', 'dead', 'cancelled');

-- A queue table churns dead tuples: vacuum it early and without throttling so the
-- pickup index stays small, and leave room on each page for updated row versions.
alter table lq.jobs set (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
