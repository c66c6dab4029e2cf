#!/usr/bin/env bash
# The wake-up's busy rate (stop 71): one lq-bench binary built with
# bench/experiments/busy_rate_env.patch applied (it reads the rate the notifier
# keeps while a process makes over 2,000 enqueue calls a second from
# LQ_EXP_BUSY_RATE, default 250), run in four blocks, A B B A: A at the shipped
# 250 a second, B at RATE. Each block runs the Enqueuer's enqueue rows (paired
# with pgbench's one-client insert) and the latency scenario.
#
# usage: scripts/with-postgres bench/experiments/busy_rate_pairs.sh LQ_BENCH [RATE]
#   (PGHOST/PGPORT/PGUSER must name the same server, for the ceiling's pgbench)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=$1 rate=${2:-100}
ceiling=${LQ_CEILING:-$here/../shared/bench/ceiling}
for arm in A B B A; do
  if [ "$arm" = B ]; then export LQ_EXP_BUSY_RATE=$rate; else unset LQ_EXP_BUSY_RATE; fi
  echo "=== block $arm: busy rate ${LQ_EXP_BUSY_RATE:-250}/s, $(date -u +%H:%M)"
  LQ_BENCH_ENQUEUER_ONLY=1 "$bench" --only enqueue --quick --no-sweep --ceiling-script "$ceiling" 2>&1 |
    grep -E '^\| 1\. enqueue single/tx, 1 producer.*Enqueuer, paired|^- CPU a job'
  "$bench" --only latency --quick --no-ceiling 2>&1 | grep -E '^\| 5\. latency (serial|open loop (500|4000)/s), NOTIFY'
done
