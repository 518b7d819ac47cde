-- 009_unsettled: a P or U row never ends by time. Its work may have run, so
-- forgetting it let the next retry run the work again; only settling it
-- (Complete, Release by its owner, Resolve, Delete) ends it. The queries
-- treat a P or U row as live whatever its expires_at (an older version
-- still serving during a rolling upgrade writes P rows with a finite end),
-- every write of a P or U row now sets expires_at to 2200-01-01, the
-- reaper never deletes one, and this migration turns the rows already
-- there, those whose end has passed too (a row the reaper had not deleted
-- yet is not known to be settled: kept, the safe side).
--
-- The end is finite, not infinity: an older version reads every row with
-- expires_at - clock_timestamp(), which PostgreSQL refuses on infinity,
-- and checks that it is ahead (queries.go, unsettledEnd). Every P or U row
-- gets its lease's end in lease_until first where it has none (a row from
-- before 004_unknown.sql, or a U row that was one: expires_at for a P row,
-- the time it turned UNKNOWN for a U row), so that no read subtracts from
-- NULL.
--
-- This file changed before its first release: it wrote infinity. It is
-- edited in place rather than followed by a fix, since no release ran it;
-- a development database that ran the first text is turned by these
-- statements only if 009 runs again (drop its schema_migrations row).
-- Each statement matches nothing once run: the migration is idempotent.
--
-- Separate statements, so that each reads one partial index: records_leases
-- (P rows) and records_unknown (U rows).
UPDATE records SET lease_until = coalesce(lease_until, expires_at), expires_at = timestamptz '2200-01-01 00:00:00+00'
WHERE state = 'P' AND expires_at <> timestamptz '2200-01-01 00:00:00+00';
UPDATE records SET lease_until = coalesce(lease_until, completed_at, expires_at), expires_at = timestamptz '2200-01-01 00:00:00+00'
WHERE reason IS NOT NULL AND state = 'U' AND (expires_at <> timestamptz '2200-01-01 00:00:00+00' OR lease_until IS NULL);

-- The retentions a P or U row's attempt asked for, in microseconds (the
-- longer of each, through Extend and MarkUnknown): a resolution records
-- the result for at least them (store.Record.Retention, KeyRetention).
-- NULL in rows an older version wrote: read as 0 (the engine's own then).
ALTER TABLE records ADD COLUMN IF NOT EXISTS retention_us bigint, ADD COLUMN IF NOT EXISTS key_retention_us bigint;
