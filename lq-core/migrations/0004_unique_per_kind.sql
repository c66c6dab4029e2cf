-- litequeue schema, version 4: unique keys are per kind.
--
-- Two job types whose templates render the same text (`ChargeCard { id: "42" }`
-- and `ResetPassword { id: "42" }`, both `unique_key = "{id}"`) are different
-- jobs: the second must not be dropped as a duplicate of the first. lq.jobs holds
-- only live jobs since version 3, so the index needs no state in its predicate.

create unique index jobs_unique_kind_key on lq.jobs (kind, unique_key) where unique_key is not null;

drop index lq.jobs_unique_live;
