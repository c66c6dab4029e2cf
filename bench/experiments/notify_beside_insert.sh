#!/usr/bin/env bash
# Does a stream of NOTIFYs from another session slow a one-client insert (stop
# 67)? pgbench's one-client insert (the ceiling's enqueue_1.sql, prepared, no
# TLS) for T seconds, alone and beside a second pgbench client at RATE a second
# sending: a NOTIFY committed asynchronously (what litequeue's notifier sends), a
# NOTIFY committed synchronously, or `select 1` (a round trip that writes
# nothing). Three rounds; prints each run's inserts a second. Works in a
# database of its own, dropped at the end.
#
# usage: scripts/with-postgres bench/experiments/notify_beside_insert.sh [rounds]
#        (RATE=700 T=10 by default; LQ_CEILING=dir of the ceiling's scripts)
set -euo pipefail
ceiling=${LQ_CEILING:-$(cd "$(dirname "$0")/../../.." && pwd)/shared/bench}
rounds=${1:-3} rate=${RATE:-700} t=${T:-10}
export PGSSLMODE=disable
db=lq_notify_beside
side=$(mktemp -d)
trap 'rm -rf "$side"; psql -qd postgres -c "drop database if exists $db with (force)" >/dev/null' EXIT
printf 'begin;\nset local synchronous_commit = off;\nnotify lq_probe;\ncommit;\n' >"$side/async.sql"
printf 'begin;\nnotify lq_probe;\ncommit;\n' >"$side/sync.sql"
printf 'select 1;\n' >"$side/select.sql"
psql -qd postgres -c "drop database if exists $db with (force)" -c "create database $db"
psql -qd "$db" -f "$ceiling/schema.sql" >/dev/null
tps() { sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
for round in $(seq 1 "$rounds"); do
  for beside in none async sync select; do
    psql -qd "$db" -c "truncate jobs" -c checkpoint
    pid=""
    if [ "$beside" != none ]; then
      pgbench -n -M prepared -c 1 -R "$rate" -T $((t + 2)) -f "$side/$beside.sql" "$db" >"$side/out" 2>&1 &
      pid=$!
    fi
    inserts=$(pgbench -n -M prepared -c 1 -T "$t" -f "$ceiling/enqueue_1.sql" "$db" 2>&1 | tps)
    beside_rate=""
    if [ -n "$pid" ]; then wait "$pid"; beside_rate=$(tps <"$side/out"); fi
    printf 'round %s  beside=%-6s inserts/s=%8.0f  beside/s=%s\n' "$round" "$beside" "$inserts" "$beside_rate"
  done
done
