#!/usr/bin/env bash
# Samples the active client backends of the bench's server (127.0.0.1:5432, user
# postgres) every ~10 ms for SECONDS seconds and counts each (state, wait event,
# statement prefix); run it beside a drain to see how busy the claim and the
# success write keep their backends.
# usage: bench/experiments/sample_activity.sh SECONDS
set -euo pipefail
end=$((SECONDS + ${1:?seconds}))
while [ $SECONDS -lt $end ]; do
  echo "select 'S', state, coalesce(wait_event_type,'-')||':'||coalesce(wait_event,'-'), left(regexp_replace(query,'\s+',' ','g'),40) from pg_stat_activity where backend_type='client backend' and pid<>pg_backend_pid() and state='active';"
  echo "select pg_sleep(0.01);"
done | psql -h 127.0.0.1 -U postgres -At -F'|' postgres 2>/dev/null | grep '^S|' | cut -d'|' -f2- | sort | uniq -c | sort -rn
