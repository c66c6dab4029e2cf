-- litequeue schema, version 12: a schedule records the job it fires, so a tool
-- without the application's types can run it now.
--
-- `lq cron run KIND`, the dashboard's "Run now" and control::cron_run_now enqueue
-- one job of a recurring kind outside its schedule. The CLI and the dashboard do
-- not link the application's job types, so they cannot build its payload (the
-- type's Default) or its unique key. The runtime that declares a schedule now
-- records both beside the expression, with the priority and attempts its type
-- sets; the queue is recorded since version 5. Null until a runtime of this
-- version (or later) declares the schedule.
--
-- Columns only, read and written by name: version 11's statements work
-- unchanged (serves_from 11). A runtime of version 11 running beside a newer one
-- leaves them as they are.

alter table lq.cron_schedules
    add column payload      jsonb,
    add column priority     smallint,
    add column max_attempts integer,
    add column unique_key   text;
