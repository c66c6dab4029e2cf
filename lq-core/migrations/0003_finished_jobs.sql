-- litequeue schema, version 3: finished jobs leave the queue table.
--
-- lq.jobs now holds only live jobs (queued or running). The statement that ends a
-- job (succeeded, dead or cancelled) deletes its row from lq.jobs and inserts it
-- into lq.finished_jobs, in one statement and so in one transaction. The queue
-- table, its indexes and its vacuums then stay as small as the live work, however
-- much history is kept: "a large history of finished jobs must not slow the claim".
-- lq.all_jobs shows both tables with the columns of lq.jobs, for inspection.

create table lq.finished_jobs (
    id                  bigint       primary key,
    kind                text         not null,
    queue               text         not null,
    priority            smallint     not null,
    payload             jsonb        not null,
    state               lq.job_state not null
        constraint finished_jobs_final check (state in ('succeeded', 'dead', 'cancelled')),
    run_at              timestamptz  not null,
    attempts            integer      not null,
    max_attempts        integer      not null,
    unique_key          text,
    -- the worker that held the lease when the job ended (null if it ended while queued)
    lease_owner         text,
    cancel_requested_at timestamptz,
    errors              jsonb        not null,
    created_at          timestamptz  not null,
    started_at          timestamptz,
    finished_at         timestamptz  not null
);

-- Pruning deletes by age.
create index finished_jobs_finished_at on lq.finished_jobs (finished_at);

with moved as (
    delete from lq.jobs where state in ('succeeded', 'dead', 'cancelled') returning *
)
insert into lq.finished_jobs (id, kind, queue, priority, payload, state, run_at, attempts,
    max_attempts, unique_key, lease_owner, cancel_requested_at, errors, created_at, started_at,
    finished_at)
select id, kind, queue, priority, payload, state, run_at, attempts,
    max_attempts, unique_key, lease_owner, cancel_requested_at, errors, created_at, started_at,
    coalesce(finished_at, now())
from moved;

drop index lq.jobs_finished;

alter table lq.jobs add constraint jobs_live_only check (state in ('queued', 'running'));

-- Every job, live or finished, with the columns of lq.jobs. A finished job holds no
-- lease; its lease_owner is the worker that held the lease when it ended.
create view lq.all_jobs as
    select id, kind, queue, priority, payload, state, run_at, attempts, max_attempts, unique_key,
           lease_token, lease_owner, lease_expires_at, cancel_requested_at, errors, created_at,
           started_at, finished_at
    from lq.jobs
    union all
    select id, kind, queue, priority, payload, state, run_at, attempts, max_attempts, unique_key,
           null, lease_owner, null, cancel_requested_at, errors, created_at,
           started_at, finished_at
    from lq.finished_jobs;
