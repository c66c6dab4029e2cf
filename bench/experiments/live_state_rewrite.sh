#!/usr/bin/env bash
# How long schema version 8's upgrade holds lq.jobs: a database of its own
# (lq_rw, dropped at the end) at version 7 with N queued jobs (default 2M), then
# migrations/0008_live_state.sql timed in one transaction. On the bench's server
# (127.0.0.1:5432, user postgres).
# usage: bench/experiments/live_state_rewrite.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../.."
psql -qX -h 127.0.0.1 -U postgres -c "drop database if exists lq_rw" -c "create database lq_rw"
args=(); for n in 1 2 3 4 5 6 7; do args+=(-f "$(ls migrations/000${n}_*.sql)"); done
psql -qX -h 127.0.0.1 -U postgres -d lq_rw -v ON_ERROR_STOP=1 -c "create schema lq" "${args[@]}" >/dev/null
N=${1:-2000000}
psql -qX -h 127.0.0.1 -U postgres -d lq_rw -v ON_ERROR_STOP=1 -c "insert into lq.jobs (kind, queue, payload, max_attempts) select 'noop', 'default', jsonb_build_object('n', g), 25 from generate_series(1, $N) g" -c "vacuum analyze lq.jobs" -c checkpoint
echo "size: $(psql -XAt -h 127.0.0.1 -U postgres -d lq_rw -c "select pg_size_pretty(pg_total_relation_size('lq.jobs'))")"
s=$(date +%s.%N)
psql -qX -h 127.0.0.1 -U postgres -d lq_rw -v ON_ERROR_STOP=1 -c begin -f migrations/0008_live_state.sql -c commit
e=$(date +%s.%N)
echo "migration 8 on $N queued jobs: $(echo "$e - $s" | bc) s"
psql -qX -h 127.0.0.1 -U postgres -c "drop database lq_rw"
