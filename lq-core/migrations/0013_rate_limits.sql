-- litequeue schema, version 13: a rate limit per queue, and each runtime's
-- limits where operators can see them.
--
-- A runtime given RuntimeBuilder::rate_limit(queue, ..) starts at most `allowed`
-- of the queue's jobs per `period` across every runtime, on average, and at
-- most `allowed` at once after a quiet spell: a token bucket, one row per
-- queue. Each claim of a rate-limited queue refills the bucket by the time
-- passed (database time), takes at most its whole tokens, and spends one token
-- for each job it claims, in one transaction that holds the queue's limit lock,
-- so claims across runtimes take turns on it. The row records the rate the
-- last claim used, for operators; a queue without a row has no limit.
--
-- Each runtime records the limits it sets on its queues beside their
-- concurrency, {"queue": {"global": 4, "rate": {"allowed": 600,
-- "period_secs": 60}}}, so `lq runtimes` shows them and `lq doctor` can say
-- when runtimes serving one queue disagree (a runtime without the limit claims
-- as if there were none). Null for a runtime built before this version.
--
-- A table only litequeue's newer statements read and a column older ones do
-- not name: version 12's statements work unchanged (serves_from 11, as
-- version 12).

create table lq.rate_limits (
    queue       text             primary key,
    -- jobs the queue may start now; refilled at allowed / period a second
    tokens      double precision not null check (tokens >= 0),
    -- the bucket's size, and the rate's numerator
    allowed     integer          not null check (allowed > 0),
    -- the rate's denominator, in seconds
    period_secs double precision not null check (period_secs > 0),
    -- when tokens was last refilled
    updated_at  timestamptz      not null
);

alter table lq.runtimes add column limits jsonb;
