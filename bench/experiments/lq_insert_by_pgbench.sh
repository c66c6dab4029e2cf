#!/usr/bin/env bash
# litequeue's single-job insert sent by pgbench itself, against the ceiling's own
# insert (enqueue_1.sql): what the statement and its table cost a one-client
# enqueue, with no Rust client and no litequeue code in the way. pgbench, one
# client, prepared, synchronous commit, alternating runs of each; then the same
# with asynchronous commit, where only CPU counts. The litequeue statement is
# `db::enqueue::INSERT_ONE` (no unique key, no metadata, NOTIFY off) with its
# parameters written in. Works in its own database, lq_insert_pgbench, dropped at
# the end.
#
# usage: scripts/with-postgres bench/experiments/lq_insert_by_pgbench.sh [rounds] [seconds]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-5}
secs=${2:-8}
db=lq_insert_pgbench
admin() { psql -qX "$DATABASE_URL" -v ON_ERROR_STOP=1 "$@"; }
admin -c "drop database if exists $db with (force)" -c "create database $db"
trap 'admin -c "drop database if exists $db with (force)"' EXIT
url="${DATABASE_URL%/*}/$db"
migrations=()
for f in "$here"/migrations/*.sql; do migrations+=(-f "$f"); done
psql -qX "$url" -v ON_ERROR_STOP=1 -c "create schema lq" "${migrations[@]}" \
    -f "${LQ_CEILING_DIR:-$here/../shared/bench}/schema.sql" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; admin -c "drop database if exists $db with (force)"' EXIT
cp "${LQ_CEILING_DIR:-$here/../shared/bench}/enqueue_1.sql" "$tmp/ceiling.sql"
cat > "$tmp/litequeue.sql" <<'SQL'
\set n random(1, 1000000000)
with ins as (insert into lq.jobs (kind, queue, priority, payload, run_at, max_attempts, unique_key) values ('noop', 'default', 0, ('{"n":' || :n || '}')::jsonb, coalesce(null::timestamptz, now() + make_interval(secs => 0::float8)), 25, null::text) returning id, run_at <= now() as ready) select id from ins where case when ready and false then (select true from pg_notify('lq_jobs', 'default')) else true end;
SQL
tps() { PGOPTIONS="-c synchronous_commit=$1" pgbench "$url" -n -c 1 -T "$secs" -M prepared -f "$2" 2>&1 |
    sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
for commit in on off; do
  echo "synchronous_commit=$commit: ceiling, litequeue, ratio"
  for _ in $(seq "$rounds"); do
    c=$(tps "$commit" "$tmp/ceiling.sql"); l=$(tps "$commit" "$tmp/litequeue.sql")
    awk -v c="$c" -v l="$l" 'BEGIN { printf "  %8.0f %8.0f  %.2f\n", c, l, l / c }'
  done
done
