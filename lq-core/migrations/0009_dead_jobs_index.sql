-- litequeue schema, version 9: dead jobs found without reading the whole history.
--
-- The dashboard's overview counts each queue's dead jobs on every refresh (once
-- per refresh period, however many tabs are open), and `lq jobs list --state
-- dead` and the dead tab list them newest first. Without an index on the state,
-- each read scanned all of lq.finished_jobs: the count took 120-140 ms at 2
-- million finished jobs (2,000 of them dead) on the 2-core benchmark host, and
-- grows with the history kept (a day of 1,000 jobs a second is 86 million rows);
-- with this index, 8 ms. Dead jobs are few, so a partial index over them stays
-- small, and a succeeded or cancelled job's move to the history only evaluates
-- its predicate.
--
-- Building it reads the whole history once under a lock that holds back the
-- writes to lq.finished_jobs (each job's completion) until it commits: about
-- 0.2 s per 2 million finished jobs on that host, during which completions
-- wait. On a large history migrate while the queue is quiet, or prune first; a
-- build that outlasts migrate()'s two-minute bound (some billion finished jobs
-- at that rate) is rolled back.

create index finished_jobs_dead on lq.finished_jobs (queue, id) where state = 'dead';
