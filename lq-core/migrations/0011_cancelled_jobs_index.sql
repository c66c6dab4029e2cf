-- litequeue schema, version 11: cancelled jobs counted without reading the whole
-- history.
--
-- The dashboard's state tabs count each state up to a cap on every refresh
-- (control::count_by_state_capped). A state with at least that many jobs stops
-- early; one with fewer reads every row that could match. Queued and running
-- jobs have partial indexes on lq.jobs and dead ones one on the history since
-- version 9; cancelled jobs, usually few, had none, so their tab read all of
-- lq.finished_jobs on each refresh. Like version 9's, this index is partial:
-- a succeeded or dead job's move to the history only evaluates its predicate.
--
-- Building it reads the history once under a lock that holds back completions
-- until it commits (version 9's took 0.19 s per 2 million finished jobs on the
-- 2-core benchmark host). An index only: builds of version 10 run against it
-- unchanged (serves_from 10).

create index finished_jobs_cancelled on lq.finished_jobs (queue, id) where state = 'cancelled';
