#!/bin/bash
# Samples, for DURATION seconds (default 170), which statements wait on a lock and which
# statements hold it: run beside a benchmark (stop 45: the 16-process curve).
# Usage: bench/experiments/who_blocks_whom.sh [DURATION] > blocks.txt; sort blocks.txt | uniq -c | sort -rn
end=$((SECONDS+${1:-170}))
while [ $SECONDS -lt $end ]; do
  PGSSLMODE=disable psql -h 127.0.0.1 -U postgres -d postgres -Atq -c "
    select w.wait_event || ' | ' || regexp_replace(left(w.query, 60), '\s+', ' ', 'g') || ' | BLOCKED BY | ' || regexp_replace(left(b.query, 60), '\s+', ' ', 'g') || ' | ' || b.state
    from pg_stat_activity w
    cross join lateral unnest(pg_blocking_pids(w.pid)) bp(pid)
    join pg_stat_activity b on b.pid = bp.pid
    where w.wait_event_type = 'Lock'" 2>/dev/null
  sleep 0.2
done
