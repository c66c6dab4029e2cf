#!/usr/bin/env bash
# What lq.jobs's check constraints cost a single-row insert, before and after
# schema version 8 moved two of them into types (bench/FINDINGS.md, "Stop 33").
# In a database of its own (lq_live_exp, dropped at the end), with migrations 1-7
# applied, copies of lq.jobs:
#   v7          as shipped by version 7: three check constraints
#   v8          state typed lq.live_state, max_attempts lq.attempt_limit, the lease check
#   v8_nolease  the same without the lease check (not shipped; what it costs)
#   none        no check constraints and no types (not shipped)
# Then: (1) server time per one-row insert from a PL/pgSQL loop, six interleaved
# rounds; (2) litequeue's single-insert statement under pgbench, 4 clients, 10 s,
# five interleaved rounds, each on an emptied table after a checkpoint.
#
# usage: scripts/with-postgres bench/experiments/live_state_insert.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
db=lq_live_exp
admin() { psql -qX "$DATABASE_URL" -v ON_ERROR_STOP=1 "$@"; }
admin -c "drop database if exists $db with (force)" -c "create database $db"
url="${DATABASE_URL%/*}/$db"
sql() { psql -qX "$url" -v ON_ERROR_STOP=1 "$@"; }
migrations=()
for n in 1 2 3 4 5 6 7; do migrations+=(-f "$(ls "$here"/migrations/000${n}_*.sql)"); done
sql -c "create schema lq" "${migrations[@]}"
sql <<'SQL'
create schema lq_exp;
create type lq_exp.live_state as enum ('queued', 'running');
create domain lq_exp.attempt_limit as integer constraint attempt_limit_at_least_one check (value >= 1);
create table lq_exp.v7 (like lq.jobs including all);
create table lq_exp.none (like lq.jobs including defaults including identity including indexes);
create table lq_exp.v8 (like lq.jobs including defaults including identity);
alter table lq_exp.v8
    alter column state drop default,
    alter column state type lq_exp.live_state using state::text::lq_exp.live_state,
    alter column state set default 'queued',
    alter column max_attempts type lq_exp.attempt_limit,
    add primary key (id);
create index on lq_exp.v8 (queue, priority desc, run_at, id) where state = 'queued';
create unique index on lq_exp.v8 (kind, unique_key) where unique_key is not null;
create index on lq_exp.v8 (lease_expires_at) where state = 'running';
create table lq_exp.v8_nolease (like lq_exp.v8 including all);
alter table lq_exp.v8 add constraint jobs_lease_iff_running
    check ((state = 'running') = (lease_token is not null and lease_expires_at is not null));
do $$
declare t text;
begin
  foreach t in array array['v7', 'v8', 'v8_nolease', 'none'] loop
    -- A static statement per table, so PL/pgSQL keeps its plan as a prepared
    -- statement would.
    execute format($f$
      create function lq_exp.inserts_%1$s(n int) returns numeric language plpgsql as $b$
      declare t0 timestamptz;
      begin
        t0 := clock_timestamp();
        for i in 1..n loop
          insert into lq_exp.%1$s (kind, queue, priority, payload, run_at, max_attempts, unique_key)
          values ('noop', 'default', 0, jsonb_build_object('n', i), now(), 25, null);
        end loop;
        return round((extract(epoch from clock_timestamp() - t0) * 1e6 / n)::numeric, 2);
      end $b$;$f$, t);
  end loop;
end $$;
SQL
echo "microseconds per one-row insert (PL/pgSQL loop of 40,000):"
sql -c "select r as round, lq_exp.inserts_v7(40000) as v7, lq_exp.inserts_v8(40000) as v8,
            lq_exp.inserts_v8_nolease(40000) as v8_nolease, lq_exp.inserts_none(40000) as none
        from generate_series(1, 6) r"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for t in v7 v8; do
  # litequeue's single insert (db::enqueue::job_insert), NOTIFY not asked for.
  printf '%s\n' '\set n random(1, 1000000000)' \
    "with ins as (insert into lq_exp.$t (kind, queue, priority, payload, run_at, max_attempts, unique_key) values ('noop', 'default', 0, jsonb_build_object('n', :n::int), coalesce(null::timestamptz, now() + make_interval(secs => 0)), 25, null) returning id, run_at <= now() as ready) select id from ins where case when ready and false then (select true from pg_notify('lq_jobs', 'default')) else true end;" \
    > "$tmp/$t.sql"
done
echo "litequeue's single insert under pgbench, 4 clients, 10 s:"
for round in 1 2 3 4 5; do
  for t in v7 v8; do
    sql -c "truncate lq_exp.$t" -c checkpoint
    tps=$(pgbench -n -M prepared -c 4 -j 2 -T 10 -f "$tmp/$t.sql" "$url" 2>&1 | grep -o 'tps = [0-9]*')
    echo "round $round  $t  ${tps#tps = } inserts/s"
  done
done
admin -c "drop database $db with (force)"
