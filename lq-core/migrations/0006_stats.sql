-- litequeue schema, version 6: a per-minute rollup of job outcomes, so charts
-- and wait percentiles never scan the history (at tens of thousands of jobs a
-- second, the history grows by hundreds of millions of rows an hour).
--
-- Additive only: a runtime built for version 5 keeps working against it.

-- One row per minute (database time, when the runtime wrote it), queue and kind.
-- Every runtime adds its own counts every few seconds (insert ... on conflict
-- add), so rows are summed across the cluster. The leader deletes rows older
-- than the finished-job retention.
create table lq.stats_minute (
    minute       timestamptz      not null,
    queue        text             not null,
    kind         text             not null,
    -- attempts by outcome
    succeeded    bigint           not null default 0,
    retried      bigint           not null default 0,
    snoozed      bigint           not null default 0,
    dead         bigint           not null default 0,
    cancelled    bigint           not null default 0,
    -- attempts started, their total wait (run_at to start) and total handler
    -- time, in seconds
    started      bigint           not null default 0,
    wait_seconds double precision not null default 0,
    run_seconds  double precision not null default 0,
    -- attempts started per wait bucket; bucket i counts waits up to the i-th
    -- bound of 0.001 0.005 0.01 0.05 0.1 0.5 1 5 10 30 60 300 900 3600 seconds,
    -- the last bucket everything longer (lq_core::control::WAIT_BUCKET_BOUNDS)
    wait_buckets bigint[]         not null,
    primary key (minute, queue, kind),
    constraint stats_minute_buckets check (pg_catalog.cardinality(wait_buckets) = 15)
);
