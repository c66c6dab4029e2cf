#!/usr/bin/env bash
# The ceiling's one-statement drain row (claim_delete_1tx, batch 100, 4 clients, 10 s)
# with a 2M backlog so it cannot run dry (the ceiling's 1M runs dry in 10 s), and
# claim_then_delete beside it; on the bench's server (127.0.0.1:5432, user postgres),
# in a database of its own (lq_bound), dropped at the end.
# usage: bench/experiments/one_statement_bound_2m.sh
set -euo pipefail
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
[ -n "$bindir" ] && export PATH="$bindir:$PATH"
export PGHOST=127.0.0.1 PGPORT=5432 PGUSER=postgres
# No TLS, as sqlx connects in this workspace (stop 33: pgbench over TLS was up to 1.3× slower).
export PGSSLMODE=disable
here=${LQ_CEILING_DIR:-$(cd "$(dirname "$0")/../../.." && pwd)/shared/bench}
dropdb --if-exists lq_bound >/dev/null 2>&1 || true
createdb lq_bound
export PGDATABASE=lq_bound
PGOPTIONS="-c client_min_messages=warning" psql -q -f "$here/schema.sql"
for s in claim_delete_1tx claim_then_delete; do
  B=2000000
  psql -q -c "TRUNCATE jobs RESTART IDENTITY" \
    -c "INSERT INTO jobs (kind, args) SELECT 'noop', jsonb_build_object('n', g) FROM generate_series(1, $B) g" \
    -c "VACUUM ANALYZE jobs" -c "CHECKPOINT" >/dev/null
  pgbench -n -M prepared -c 4 -j 2 -T 10 -D n=100 -f "$here/$s.sql" >/dev/null 2>&1
  done=$(( B - $(psql -Atc "select count(*) from jobs") ))
  echo "drain $s batch=100 clients=4 backlog=$B: $((done / 10)) jobs/s"
done
dropdb lq_bound
