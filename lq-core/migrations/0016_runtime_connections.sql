-- litequeue schema, version 16: each runtime's connection budget, where
-- operators can see it.
--
-- A runtime opens up to RuntimeBuilder::connections() connections of its own
-- (ten for one queue) besides its application's pool, and it opens them as
-- the work needs them: an idle fleet holds few, a busy one all. Each runtime
-- now records that number in its row, so `lq runtimes` shows it and `lq
-- doctor` can add up what the live runtimes may open and say so before the
-- server refuses connections under load, rather than after. Null for a runtime
-- built before this version.
--
-- A column older statements do not name: version 15's statements work
-- unchanged (serves_from 11, as version 15).

alter table lq.runtimes add column connections integer;
