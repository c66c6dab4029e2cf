-- litequeue schema, version 7: room on every page for the claim's new row versions.
--
-- A claim rewrites each row it takes (queued -> running, with a lease), and it
-- takes the rows in pickup order, so every row on a page changes in the same
-- transaction. When the new versions do not fit beside the old ones, PostgreSQL
-- moves each to another page: an extra WAL record locking the old row, the whole
-- new row logged instead of the bytes that changed, and a second page dirtied.
-- At fillfactor 85 (version 1) most rows of a 500-job claim moved. A running row
-- is about 48 bytes larger than a queued one (token, owner, expiry, start), so
-- the smallest jobs (a 120-byte row) need a page no more than about 42 % full;
-- 40 leaves every claimed row on its page. Measured: WAL per drained job 1,061
-- -> 952 bytes (bench/FINDINGS.md, "Stop 30").
--
-- Only pages written from now on are filled less; existing rows stay where they
-- are. Additive: nothing is rewritten, and the statement takes a lock that does
-- not block reads or writes.

alter table lq.jobs set (fillfactor = 40);
