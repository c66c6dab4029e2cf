#!/usr/bin/env bash
# Two builds' one-producer enqueue side by side (stop 39: the wake-up NOTIFY in
# the enqueue's own statement): per round, pgbench's single-row insert (the
# ceiling's enqueue_1.sql, one client, prepared, no TLS), then each build's
# `driver-probe` (bench/src/bin/driver_probe.rs) on an `Enqueuer` (`enq`) and on
# the README's pool (`pool`), NOTIFY on, alternating builds, then the new build's
# `enq` with NOTIFY off. Prints jobs/s and each one's ratio to the round's pgbench.
#
# usage: scripts/with-postgres bench/experiments/wakeup_pairs.sh BASE_PROBE NEW_PROBE [rounds] [seconds]
#   where each PROBE is a driver-probe binary (build one per commit, e.g. in a worktree)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
base_probe=$1 new_probe=$2
rounds=${3:-5}
secs=${4:-5}
export PGSSLMODE=disable
# shellcheck source=bench/experiments/databases.sh
. "$here/bench/experiments/databases.sh"
trap 'drop_dbs lq_wakeup_ceiling lq_wakeup_lq' EXIT
ceiling_db lq_wakeup_ceiling
lq_db lq_wakeup_lq
ceiling_url=$(db_url lq_wakeup_ceiling) lq_url=$(db_url lq_wakeup_lq)

pgb() { pgbench_insert "$ceiling_url" "$secs"; }
run() { # probe what [env...]
  local probe=$1 what=$2; shift 2
  env DATABASE_URL="$lq_url" "$@" "$probe" "$what" mt "$secs" | sed 's|.* \([0-9]*\)/s$|\1|'
}
cols=(pgbench base-enq new-enq new-pool base-pool new-enq-off)
printf '%-16s' "${cols[@]}"; echo
for i in $(seq "$rounds"); do
  base=$(pgb)
  out=("$base")
  if [ $((i % 2)) = 1 ]; then
    e1=$(run "$base_probe" enq); e2=$(run "$new_probe" enq)
    p2=$(run "$new_probe" pool); p1=$(run "$base_probe" pool)
  else
    e2=$(run "$new_probe" enq); e1=$(run "$base_probe" enq)
    p1=$(run "$base_probe" pool); p2=$(run "$new_probe" pool)
  fi
  out+=("$e1" "$e2" "$p2" "$p1" "$(run "$new_probe" enq PROBE_NOTIFY=0)")
  for v in "${out[@]}"; do
    printf '%-16s' "$(awk -v t="$v" -v c="$base" 'BEGIN { printf "%d (%.2f)", t, t / c }')"
  done
  echo
done
