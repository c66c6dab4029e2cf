-- What lq.jobs's check constraints cost a single-row insert, in server CPU alone
-- (no round trip, no commit): 50,000 one-row inserts from a PL/pgSQL loop into a
-- copy of lq.jobs without its check constraints and into one with them, three
-- times, interleaved. Also 100 inserts of 1,000 rows each, per row.
--
-- usage: scripts/with-postgres sh -c 'psql "$DATABASE_URL" -f bench/experiments/check_constraint_cost.sql'
-- (on a database that litequeue has migrated: it needs the lq.job_state type and
-- the lq.jobs table; it works in a scratch schema, lq_exp, and drops it at the end).
\set ON_ERROR_STOP on
drop schema if exists lq_exp cascade;
create schema lq_exp;
create table lq_exp.plain (like lq.jobs including defaults including identity);
alter table lq_exp.plain add primary key (id);
create index on lq_exp.plain (queue, priority desc, run_at, id) where state = 'queued';
create table lq_exp.checked (like lq_exp.plain including all);

-- Copies lq.jobs's own check constraints onto lq_exp.checked.
do $$
declare c record;
begin
  for c in select conname, pg_get_constraintdef(oid) as def from pg_constraint
           where conrelid = 'lq.jobs'::regclass and contype = 'c' loop
    execute format('alter table lq_exp.checked add constraint %I %s', c.conname, c.def);
  end loop;
end $$;

create function lq_exp.one_row_inserts(tbl regclass, n int) returns numeric language plpgsql as $$
declare t0 timestamptz;
begin
  -- A static statement per table, so PL/pgSQL keeps its plan as an application's
  -- prepared statement would.
  t0 := clock_timestamp();
  if tbl = 'lq_exp.plain'::regclass then
    for i in 1..n loop
      insert into lq_exp.plain (kind, queue, priority, payload, max_attempts)
      values ('noop', 'default', 0, jsonb_build_object('n', i), 25);
    end loop;
  else
    for i in 1..n loop
      insert into lq_exp.checked (kind, queue, priority, payload, max_attempts)
      values ('noop', 'default', 0, jsonb_build_object('n', i), 25);
    end loop;
  end if;
  return round((extract(epoch from clock_timestamp() - t0) * 1e6 / n)::numeric, 2);
end $$;

create function lq_exp.bulk_inserts(tbl regclass, n int) returns numeric language plpgsql as $$
declare t0 timestamptz;
begin
  t0 := clock_timestamp();
  if tbl = 'lq_exp.plain'::regclass then
    for i in 1..n loop
      insert into lq_exp.plain (kind, queue, priority, payload, max_attempts)
      select 'noop', 'default', 0, jsonb_build_object('n', g), 25 from generate_series(1, 1000) g;
    end loop;
  else
    for i in 1..n loop
      insert into lq_exp.checked (kind, queue, priority, payload, max_attempts)
      select 'noop', 'default', 0, jsonb_build_object('n', g), 25 from generate_series(1, 1000) g;
    end loop;
  end if;
  return round((extract(epoch from clock_timestamp() - t0) * 1e6 / n / 1000)::numeric, 3);
end $$;

\echo 'microseconds per one-row insert: plain | checked'
select lq_exp.one_row_inserts('lq_exp.plain', 50000) as plain,
       lq_exp.one_row_inserts('lq_exp.checked', 50000) as checked
from generate_series(1, 3);
\echo 'microseconds per row, 1,000 rows per insert: plain | checked'
select lq_exp.bulk_inserts('lq_exp.plain', 100) as plain,
       lq_exp.bulk_inserts('lq_exp.checked', 100) as checked
from generate_series(1, 3);
drop schema lq_exp cascade;
