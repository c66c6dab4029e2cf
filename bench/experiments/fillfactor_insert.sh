#!/usr/bin/env bash
# Does a queue table filled to 40 % (schema version 7) slow a single-row insert?
# pgbench, prepared, C clients (default 4), 8 s runs, four interleaved rounds of
# copies of lq.jobs (checks and indexes included) at fillfactor 85 and 40, each
# run on an emptied table after a checkpoint; on the bench's server
# (127.0.0.1:5432, user postgres), in a database of its own, dropped at the end.
# usage: [C=1] bench/experiments/fillfactor_insert.sh
set -euo pipefail
export PGHOST=127.0.0.1 PGUSER=postgres
here=$(cd "$(dirname "$0")/../.." && pwd)
db=lq_ff_exp
psql -qX -d postgres -c "drop database if exists $db with (force)" -c "create database $db"
sql() { psql -qX -d $db -v ON_ERROR_STOP=1 "$@"; }
sql -c "create schema lq" -f $here/migrations/0001_jobs.sql -f $here/migrations/0002_cron.sql -f $here/migrations/0003_finished_jobs.sql \
  -c "create table t85 (like lq.jobs including all) with (fillfactor = 85)" \
  -c "create table t40 (like lq.jobs including all) with (fillfactor = 40)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for t in t85 t40; do
  printf '%s\n' '\set n random(1, 1000000000)' \
    "insert into $t (kind, queue, payload, max_attempts) values ('noop', 'default', jsonb_build_object('n', :n::int), 25);" > "$tmp/$t.sql"
done
for round in 1 2 3 4; do
  for t in t85 t40 t40 t85; do
    sql -c "truncate t85, t40" -c checkpoint
    tps=$(pgbench -n -M prepared -c ${C:-4} -j 2 -T 8 -f "$tmp/$t.sql" $db 2>&1 | grep -o 'tps = [0-9]*')
    echo "round $round $t ${tps#tps = }"
  done
done
psql -qX -d postgres -c "drop database $db with (force)"
