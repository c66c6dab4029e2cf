#!/usr/bin/env bash
# litequeue's single-job insert sent by pgbench itself, against the ceiling's own
# insert (enqueue_1.sql): what the statement and its table cost a one-client
# enqueue, with no Rust client and no litequeue code in the way. pgbench, one
# client, prepared, no TLS (as the benchmark's paired runs), alternating runs of
#   ceiling   enqueue_1.sql into the ceiling's own `jobs` table
#   shipped   the single insert as shipped up to 26bc6b5 (a CTE that returns
#             whether the row is due; no unique key, no metadata, NOTIFY off),
#             its parameters written in; the in-transaction enqueue still sends
#             this shape (`INSERT_ONE_NOTIFYING`)
#   plain     a plain one-row insert of the same values into lq.jobs (no CTE):
#             the shape autocommit enqueues send since 4d7ccc9 (`INSERT_ONE`)
#   ff100     the plain insert into a copy of lq.jobs with fillfactor 100
#   nocheck   the plain insert into a copy of lq.jobs without its check
#             constraint (jobs_lease_iff_running), fillfactor 40 as shipped
# first with synchronous commit, then with asynchronous commit, where only CPU
# counts. Prints tps per round and each variant's ratio to the ceiling run in
# the same round. Works in its own database, lq_insert_pgbench, dropped at the end.
#
# usage: scripts/with-postgres bench/experiments/lq_insert_by_pgbench.sh [rounds] [seconds]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-5}
secs=${2:-8}
export PGSSLMODE=disable
db=lq_insert_pgbench
admin() { psql -qX "$DATABASE_URL" -v ON_ERROR_STOP=1 "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; admin -c "drop database if exists $db with (force)"' EXIT
admin -c "drop database if exists $db with (force)" -c "create database $db" 2>/dev/null
url="${DATABASE_URL%/*}/$db"
migrations=()
for f in "$here"/migrations/*.sql; do migrations+=(-f "$f"); done
# The version table is created by migrate() itself (lq-core/src/db/migration.rs)
# before the first migration; from version 10 on the migrations read it.
psql -qX "$url" -v ON_ERROR_STOP=1 -c "create schema lq" \
    -c "create table lq.schema_migrations (version integer primary key, name text not null, applied_at timestamptz not null default now())" \
    "${migrations[@]}" \
    -f "${LQ_CEILING_DIR:-$here/../shared/bench}/schema.sql" \
    -c "create table lq.ff100 (like lq.jobs including all) with (fillfactor = 100)" \
    -c "create table lq.nocheck (like lq.jobs including defaults including identity including indexes) with (fillfactor = 40)" \
    >/dev/null 2>&1
cp "${LQ_CEILING_DIR:-$here/../shared/bench}/enqueue_1.sql" "$tmp/ceiling.sql"
cat > "$tmp/shipped.sql" <<'SQL'
\set n random(1, 1000000000)
with ins as (insert into lq.jobs (kind, queue, priority, payload, run_at, max_attempts, unique_key) values ('noop', 'default', 0, ('{"n":' || :n || '}')::jsonb, coalesce(null::timestamptz, now() + make_interval(secs => 0::float8)), 25, null::text) returning id, run_at <= now() as ready) select id from ins where case when ready and false then (select true from pg_notify('lq_jobs', 'default')) else true end;
SQL
for t in jobs ff100 nocheck; do
  printf '%s\n' '\set n random(1, 1000000000)' \
    "insert into lq.$t (kind, queue, priority, payload, run_at, max_attempts) values ('noop', 'default', 0, ('{\"n\":' || :n || '}')::jsonb, now(), 25);" \
    > "$tmp/$t.sql"
done
mv "$tmp/jobs.sql" "$tmp/plain.sql"
variants=(ceiling shipped plain ff100 nocheck)
tps() { PGOPTIONS="-c synchronous_commit=$1" pgbench "$url" -n -c 1 -T "$secs" -M prepared -f "$tmp/$2.sql" 2>&1 |
    sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
for commit in on off; do
  echo "synchronous_commit=$commit: tps (ratio to the ceiling's run in the same round)"
  printf '  %-18s' "${variants[@]}"; echo
  for _ in $(seq "$rounds"); do
    c=""
    for v in "${variants[@]}"; do
      t=$(tps "$commit" "$v")
      c=${c:-$t}
      printf '  %-18s' "$(awk -v t="$t" -v c="$c" 'BEGIN { printf "%.0f (%.2f)", t, t / c }')"
    done
    echo
  done
done
