#!/usr/bin/env bash
# What litequeue's row costs a single-row insert at one client, end to end
# (round trip and commit included): pgbench, one client, prepared, 10 s runs,
# three interleaved rounds, each run on an emptied table after a checkpoint, of
#   ceiling  the ceiling's insert into its own `jobs` table (../shared/bench)
#   lq       the same insert into lq.jobs (the migrations' table, as shipped)
#   nochk    into a copy of lq.jobs without its three check constraints
#   nochk85  the same copy with lq.jobs's fillfactor (85)
#   chk100   a copy with the check constraints and fillfactor 100
# It works in its own database, lq_insert_exp, and drops it at the end.
#
# usage: scripts/with-postgres bench/experiments/single_insert_tables.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
db=lq_insert_exp
admin() { psql -qX "$DATABASE_URL" -v ON_ERROR_STOP=1 "$@"; }
admin -c "drop database if exists $db with (force)" -c "create database $db"
url="${DATABASE_URL%/*}/$db"
sql() { psql -qX "$url" -v ON_ERROR_STOP=1 "$@"; }
sql -c "create schema lq" \
    -f "$here/migrations/0001_jobs.sql" -f "$here/migrations/0002_cron.sql" \
    -f "$here/migrations/0003_finished_jobs.sql" \
    -f "${LQ_CEILING_DIR:-$here/../shared/bench}/schema.sql" \
    -c "create table nochk (like lq.jobs including defaults including identity including indexes)" \
    -c "create table nochk85 (like lq.jobs including defaults including identity including indexes) with (fillfactor = 85)" \
    -c "create table chk100 (like lq.jobs including all)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%s\n' '\set n random(1, 1000000000)' \
  "INSERT INTO jobs (kind, args) VALUES ('noop', jsonb_build_object('n', :n::int));" > "$tmp/ceiling.sql"
for t in lq nochk nochk85 chk100; do
  table=$t; [ "$t" = lq ] && table=lq.jobs
  printf '%s\n' '\set n random(1, 1000000000)' \
    "insert into $table (kind, queue, payload, max_attempts) values ('noop', 'default', jsonb_build_object('n', :n::int), 25);" > "$tmp/$t.sql"
done
for round in 1 2 3; do
  for t in ceiling lq nochk nochk85 chk100; do
    sql -c "truncate jobs, lq.jobs, nochk, nochk85, chk100" -c checkpoint
    tps=$(pgbench -n -M prepared -c 1 -T 10 -f "$tmp/$t.sql" "$url" 2>&1 | grep -o 'tps = [0-9]*')
    echo "round $round  $t  ${tps#tps = } inserts/s"
  done
done
admin -c "drop database $db with (force)"
