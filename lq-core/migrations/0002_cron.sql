-- litequeue schema, version 2: durable cron schedules.
--
-- cron_schedules holds, per recurring kind, the newest tick already decided; the
-- scheduler locks the row (skip locked) so one runtime decides each tick.
-- cron_ticks is the constraint behind "exactly once per tick": its primary key is
-- written in the same transaction as the tick's job, and it does not depend on how
-- long finished jobs are kept.

create table lq.cron_schedules (
    kind       text primary key,
    last_tick  timestamptz not null,
    checked_at timestamptz not null default now()
);

create table lq.cron_ticks (
    kind     text        not null,
    tick     timestamptz not null,
    job_id   bigint,
    fired_at timestamptz not null default now(),
    -- true when this job stands for a whole window of ticks missed while no runtime ran
    catch_up boolean     not null default false,
    primary key (kind, tick)
);
