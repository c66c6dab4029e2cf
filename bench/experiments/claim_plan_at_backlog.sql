-- Why the 10M backlog point of the curves bends: EXPLAIN ANALYZE of the claim statement as the
-- runtime runs it (generic plan, hot-path settings), after a prefill like the curves' one.
-- psql -d lq_bench -v chunks=10 -f claim_plan_at_backlog.sql   (chunks = millions of jobs; empties lq.jobs first)
-- Add `set jit = off;` before the prepare to compare.
-- The statement is the claim as it was at stop 28, when this ran; since stop 29 the runtime
-- mints the lease tokens and passes them as $6, and since stop 51 its update finds the locked
-- rows by ctid, not id (lq-core/src/db/claim.rs).
\timing on
truncate lq.jobs, lq.finished_jobs;
select format($f$insert into lq.jobs (kind, queue, payload, max_attempts)
  select 'bench.noop', 'default', jsonb_build_object('n', g, 'pad', (select string_agg(md5(g::text || '.' || i::text), '') from generate_series(1, 0) i)), 20
  from generate_series(%s, %s) g$f$, i * 1000000 + 1, (i + 1) * 1000000)
from generate_series(0, :chunks - 1) i \gexec
vacuum analyze lq.jobs;
checkpoint;
set search_path = pg_catalog;
set plan_cache_mode = force_generic_plan; set enable_seqscan = off; set enable_bitmapscan = off; set enable_sort = off;
prepare claim(text, text[], int8, text, float8[]) as
with picked as materialized (
     select id from lq.jobs
     where state = 'queued' and queue = $1 and run_at <= now() and kind = any($2)
       and not exists (select from lq.queues q where q.name = $1 and q.paused_at is not null)
     order by priority desc, run_at, id
     limit $3
     for update skip locked
 )
 update lq.jobs j
 set state = 'running', attempts = j.attempts + 1, started_at = now(),
     lease_token = gen_random_uuid(), lease_owner = $4,
     lease_expires_at = now() + make_interval(secs => ($5::float8[])[array_position($2::text[], j.kind)])
 where j.id = any(array(select id from picked))
 returning j.id, j.kind, j.payload::text as payload, j.attempts, j.max_attempts, j.lease_token,
           j.run_at, j.created_at, j.started_at, j.meta::text as meta;
begin;
explain (analyze, buffers, timing off, summary on) execute claim('default', '{bench.noop}', 300, 'diag', '{60}');
rollback;
begin;
explain (analyze, buffers, timing off, summary on) execute claim('default', '{bench.noop}', 300, 'diag', '{60}');
rollback;
