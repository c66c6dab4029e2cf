#!/usr/bin/env bash
# Two builds' enqueue from several producer processes at once (stop 39: the
# wake-up NOTIFY in the enqueue's own statement, tried and not kept): per round
# and build, PROCS `driver-probe enq` processes (one producer each, on an
# `Enqueuer`, NOTIFY on: bench/src/bin/driver_probe.rs) run together for SECS
# on one freshly migrated database; prints their summed jobs/s. DELAY_US sets
# `commit_delay` on that database (with `commit_siblings = 0`) to stand in for
# a slower disk's WAL flush; 0 leaves it alone.
#
# usage: scripts/with-postgres bench/experiments/producer_processes.sh BASE_PROBE NEW_PROBE [procs] [rounds] [secs] [delay_us]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
base_probe=$1 new_probe=$2
procs=${3:-4} rounds=${4:-3} secs=${5:-5} delay=${6:-0}
export PGSSLMODE=disable
# shellcheck source=bench/experiments/databases.sh
. "$here/bench/experiments/databases.sh"
db=lq_producer_processes
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; drop_dbs $db' EXIT
lq_db $db
admin -c "alter database $db set commit_delay = $delay" -c "alter database $db set commit_siblings = 0"
url=$(db_url $db)
for r in $(seq "$rounds"); do
  order=(base new); [ $((r % 2)) = 0 ] && order=(new base)
  for build in "${order[@]}"; do
    probe=$base_probe; [ "$build" = new ] && probe=$new_probe
    for i in $(seq "$procs"); do
      DATABASE_URL=$url "$probe" enq mt "$secs" >"$tmp/out.$i" &
    done
    wait
    rates=$(sed 's|.* \([0-9]*\)/s$|\1|' "$tmp"/out.* | paste -sd' ')
    total=$(echo "$rates" | tr ' ' '\n' | awk '{ s += $1 } END { print s }')
    echo "round $r $build: procs=$procs delay_us=$delay total=$total/s (each: $rates)"
    rm -f "$tmp"/out.*
  done
done
