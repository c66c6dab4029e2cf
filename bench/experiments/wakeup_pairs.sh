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
admin() { psql -qX "$DATABASE_URL" -v ON_ERROR_STOP=1 "$@"; }
ceiling_db=lq_wakeup_ceiling lq_db=lq_wakeup_lq
trap 'admin -c "drop database if exists $ceiling_db with (force)" -c "drop database if exists $lq_db with (force)"' EXIT
for db in $ceiling_db $lq_db; do
  admin -c "drop database if exists $db with (force)" -c "create database $db" 2>/dev/null
done
ceiling_url="${DATABASE_URL%/*}/$ceiling_db" lq_url="${DATABASE_URL%/*}/$lq_db"
bench_dir=${LQ_CEILING_DIR:-$here/../shared/bench}
psql -qX "$ceiling_url" -v ON_ERROR_STOP=1 -f "$bench_dir/schema.sql" >/dev/null 2>&1
migrations=()
for f in "$here"/migrations/*.sql; do migrations+=(-f "$f"); done
psql -qX "$lq_url" -v ON_ERROR_STOP=1 -c "create schema lq" "${migrations[@]}" >/dev/null 2>&1

pgb() { pgbench "$ceiling_url" -n -M prepared -c 1 -T "$secs" -f "$bench_dir/enqueue_1.sql" 2>&1 |
    sed -n 's/^tps = \([0-9]*\).*/\1/p'; }
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
