#!/usr/bin/env bash
# One producer's single enqueue, split into its parts (stop 38): alternating runs
# of pgbench's single-row insert (the ceiling's enqueue_1.sql, one client,
# prepared, no TLS) and of `driver-probe` (bench/src/bin/driver_probe.rs), one
# producer looping over one insert at a time, each on a connection of its own:
#   sql        enqueue_1.sql's insert sent by sqlx (tokio multi-thread runtime)
#   sql-ct     the same on a current-thread runtime
#   lqsql      litequeue's single insert (INSERT_ONE, no key, no metadata) by sqlx
#   lq         `job.enqueue_with(&mut conn, notify off)`: litequeue's client code
#   enq        `job.enqueue(&enqueuer)`, shipped defaults (wake-up NOTIFY on)
#   enq-off    the same with `.notify(false)`
#   enq-ext    enq-off with a second pgbench sending the notifier's NOTIFY
#              statement at 1,000 a second beside it (what the notifier does,
#              from another process)
#   pool       `job.enqueue(&pool)` on the README's pool, NOTIFY on
# Prints jobs/s per round and each one's ratio to the pgbench run that opened
# the round. Works in two databases of its own, dropped at the end.
#
# usage: scripts/with-postgres bench/experiments/one_producer_parts.sh [rounds] [seconds]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-5}
secs=${2:-5}
export PGSSLMODE=disable
probe=$here/target/release/driver-probe
(cd "$here" && cargo build -q --release -p lq-bench --bin driver-probe)
# shellcheck source=bench/experiments/databases.sh
. "$here/bench/experiments/databases.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; drop_dbs lq_parts_ceiling lq_parts_lq' EXIT
ceiling_db lq_parts_ceiling
lq_db lq_parts_lq
ceiling_url=$(db_url lq_parts_ceiling) lq_url=$(db_url lq_parts_lq)
# The notifier's statement (lq-core/src/db/enqueue.rs, QUEUES_NOTIFY) for one queue.
echo "select pg_catalog.pg_notify('lq_jobs', q) from (select pg_catalog.set_config('synchronous_commit', 'off', true)) as a, pg_catalog.unnest(array['default']) as q;" >"$tmp/notify.sql"

pgb() { pgbench_insert "$ceiling_url" "$secs"; }
run() { # what flavour [env...]
  local what=$1 flavour=$2 url=$lq_url; shift 2
  [ "$what" = sql ] && url=$ceiling_url
  env DATABASE_URL="$url" "$@" "$probe" "$what" "$flavour" "$secs" | sed 's|.* \([0-9]*\)/s$|\1|'
}
cols=(pgbench sql sql-ct lqsql lq enq enq-off enq-ext pool)
printf '%-16s' "${cols[@]}"; echo
for _ in $(seq "$rounds"); do
  base=$(pgb)
  out=("$base")
  out+=("$(run sql mt)" "$(run sql ct)" "$(run lqsql mt)" "$(run lq mt)" "$(run enq mt)")
  out+=("$(run enq mt PROBE_NOTIFY=0)")
  pgbench "$lq_url" -n -M prepared -c 1 -R 1000 -T $((secs + 1)) -f "$tmp/notify.sql" >/dev/null 2>&1 &
  sleep 0.3
  out+=("$(run enq mt PROBE_NOTIFY=0)")
  wait
  out+=("$(run pool mt)")
  for v in "${out[@]}"; do
    printf '%-16s' "$(awk -v t="$v" -v c="$base" 'BEGIN { printf "%d (%.2f)", t, t / c }')"
  done
  echo
done
