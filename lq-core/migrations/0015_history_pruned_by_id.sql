-- litequeue schema, version 15: the history pruned by id, without an index on
-- finished_at.
--
-- Every finished job wrote an entry into finished_jobs_finished_at, an index
-- only the pruner and the "finished within" filter read. Dropped for a
-- diagnosis it was worth 1-5 % of the drain on the 2-core benchmark host
-- (bench/FINDINGS.md, stops 64 and 65). The history is now pruned through its
-- primary key instead:
--
-- * A job enqueued after a moment cannot have finished before it, so the jobs
--   that finished before a cutoff all have ids at most the job id sequence's
--   value at any moment after it. The leader records that value once per
--   prune (lq.id_marks), and a prune reads the primary key up to the first
--   mark at or after its cutoff, and above the newest mark (jobs enqueued
--   since, and ids the sequence never gave). Marks only bound the scan: the
--   prune still
--   tests each row's finished_at, so a wrong or missing mark can delay a
--   prune but never delete a job inside its retention.
-- * The primary key carries each job's state and finished_at, so that scan
--   tests them in the index (an index-only scan once a page is vacuumed), and
--   the dead jobs kept longer than succeeded ones cost no heap read per prune.
--
-- Rebuilding the primary key reads the history once under a lock that holds
-- back completions until it commits. Old builds' statements still work (their
-- prune and their "finished within" filter read the table instead of the
-- dropped index): serves_from 11, as version 14.

create table lq.id_marks (
    -- the leader's now() when it read the sequence
    at      timestamptz primary key,
    -- lq.jobs_id_seq's last value then: no job drawn before `at` has a larger id
    last_id bigint      not null
);

-- A role that may delete from the history prunes it, so it may keep the marks.
do $grants$
declare
    grantee oid;
begin
    for grantee in
        select distinct a.grantee
        from pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
        where c.oid = 'lq.finished_jobs'::regclass and a.privilege_type = 'DELETE'
    loop
        if grantee = 0 then
            grant select, insert, delete on lq.id_marks to public;
        else
            execute pg_catalog.format('grant select, insert, delete on lq.id_marks to %I',
                                      pg_catalog.pg_get_userbyid(grantee));
        end if;
    end loop;
end
$grants$;

drop index lq.finished_jobs_finished_at;

alter table lq.finished_jobs
    drop constraint finished_jobs_pkey,
    add constraint finished_jobs_pkey primary key (id) include (state, finished_at);
