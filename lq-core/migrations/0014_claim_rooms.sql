-- litequeue schema, version 14: rooms where a claim waits its turn without a
-- snapshot.
--
-- A claim that finds every claim slot of its queue taken waits for one on the
-- server. That wait is a statement (pg_advisory_xact_lock), and a statement
-- holds a snapshot: while it waits, PostgreSQL may not mark dead the index
-- entries of jobs claimed and finished since, so every other claim walks past
-- them. With sixteen runtime processes on one queue about ten sessions waited
-- at a time, and PostgreSQL spent a fifth to a half more CPU a job than with
-- one (bench/FINDINGS.md, stops 59 and 61).
--
-- Since this version such a claim first waits in a room: `lock table
-- lq.claim_room_NN in exclusive mode`, a utility statement that takes no
-- snapshot while it waits. Only the room's holder then waits for the slot, so
-- each room holds at most one snapshot-holding waiter. A room is chosen from
-- the queue's name and the slot (lq_core::db::claim::claim_room); two queues
-- may share one, which orders their waiters but decides nothing: the slot's
-- advisory lock alone bounds the claims.
--
-- The rooms are views over nothing: no storage, no rows, and they cannot be
-- updated. Locking one in exclusive mode needs UPDATE on it, granted to
-- PUBLIC here so that no role's grants change; naming it still needs USAGE on
-- schema lq. A runtime refused the lock claims as before and logs why.
--
-- New objects only older statements never name: version 13's statements work
-- unchanged (serves_from 11, as version 13).

do $rooms$
begin
    for room in 0..15 loop
        execute pg_catalog.format(
            'create view lq.%I as select;
             comment on view lq.%I is %L;
             grant update on lq.%I to public',
            'claim_room_' || pg_catalog.lpad(room::text, 2, '0'),
            'claim_room_' || pg_catalog.lpad(room::text, 2, '0'),
            'litequeue: claims waiting for a claim slot queue here first, holding no snapshot (schema version 14)',
            'claim_room_' || pg_catalog.lpad(room::text, 2, '0'));
    end loop;
end
$rooms$;
