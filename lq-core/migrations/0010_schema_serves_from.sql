-- litequeue schema, version 10: a schema says which builds it still serves.
--
-- Until now a process refused to start against a schema newer than the one it
-- was built for (Error::SchemaTooNew). In a rolling deploy the first new process
-- migrates; an old one that restarts before its turn (a crash, a scale-up) then
-- refuses to start, even when the migration only added an index it never reads.
--
-- Each migration now records, beside its version, the oldest schema version
-- whose code still works against it (serves_from). A build that knows version K
-- runs against a schema at version F > K when every migration above K serves K
-- or older; a migration that changes what older statements read or write serves
-- only its own version, and older builds refuse as before. Builds from version
-- 10 on read the column; older ones refuse any newer schema, as they always did.
--
-- Earlier migrations are recorded as serving their own version only, except
-- version 9, which only added an index (it serves 8). That is conservative
-- (versions 5 and 6 were additive too) and never consulted: builds before 10
-- do not read the column, and later builds only read rows above their own.
--
-- Altering the version table locks it exclusively until the upgrade commits
-- (with the migrations before it, when several are pending): meanwhile each
-- process starting, each migrate() and `lq doctor` wait to read the version,
-- for at most 2 s at a time in migrate(), which then tries again.

alter table lq.schema_migrations add column serves_from integer;
update lq.schema_migrations
   set serves_from = case when version = 9 then 8 else version end;
alter table lq.schema_migrations alter column serves_from set not null;
