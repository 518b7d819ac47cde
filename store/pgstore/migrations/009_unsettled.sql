-- 009_unsettled: a P or U row never ends by time. Its work may have run, so
-- forgetting it let the next retry run the work again; only settling it
-- (Complete, Release by its owner, Resolve, Delete) ends it. Every write of
-- a P or U row now sets expires_at to infinity, the reaper never deletes
-- one, and this migration turns the rows already there, those whose end
-- has passed too (a row the reaper had not deleted yet is not known to be
-- settled: kept, the safe side). A P row from before 004_unknown.sql gets
-- its lease's end first, which was expires_at then.
--
-- Two statements, so that each reads one partial index: records_leases
-- (P rows) and records_unknown (U rows).
UPDATE records SET lease_until = coalesce(lease_until, expires_at), expires_at = 'infinity'
WHERE state = 'P' AND expires_at <> 'infinity';
UPDATE records SET expires_at = 'infinity'
WHERE reason IS NOT NULL AND state = 'U' AND expires_at <> 'infinity';

-- The retentions a P or U row's attempt asked for, in microseconds (the
-- longer of each, through Extend and MarkUnknown): a resolution records
-- the result for at least them (store.Record.Retention, KeyRetention).
-- NULL in rows an older version wrote: read as 0 (the engine's own then).
ALTER TABLE records ADD COLUMN IF NOT EXISTS retention_us bigint, ADD COLUMN IF NOT EXISTS key_retention_us bigint;
