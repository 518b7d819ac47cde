-- 004_unknown: the UNKNOWN state (issue 12). A PROCESSING row now outlives
-- its lease: expires_at is the end of the row (the lease plus the
-- retention), lease_until the end of the lease. A row whose lease ended
-- while it was still PROCESSING is abandoned: an acquisition turns it
-- UNKNOWN, or takes it over knowingly (taken_fence, taken_acquired_at).

-- U: UNKNOWN. NOT VALID: every existing row is P or C, so there is nothing
-- to check, and the migration does not scan the table under its lock.
ALTER TABLE records DROP CONSTRAINT IF EXISTS records_state_check;
ALTER TABLE records ADD CONSTRAINT records_state_check CHECK (state IN ('P', 'C', 'U')) NOT VALID;

ALTER TABLE records
    -- The end of the lease of a P row, by the database's clock. NULL in rows
    -- from before this migration, or written by an older version of the
    -- store during a rolling upgrade: their lease ends at expires_at, as it
    -- did then.
    ADD COLUMN IF NOT EXISTS lease_until       timestamptz,
    -- Why a U row is UNKNOWN; set exactly on U rows. The partial index below
    -- is on this column rather than on state, so that Complete (P to C)
    -- changes no indexed value and stays a HOT update (003_reap_at.sql).
    ADD COLUMN IF NOT EXISTS reason            text,
    -- The reconciliation claim of a U row (Store.Claim): who holds it, until when.
    ADD COLUMN IF NOT EXISTS claim_owner       text,
    ADD COLUMN IF NOT EXISTS claim_until       timestamptz,
    -- What an acquisition took over (a P row whose lease had ended), so that
    -- an Acquire retried after a lost reply still reports it.
    ADD COLUMN IF NOT EXISTS taken_fence       bigint,
    ADD COLUMN IF NOT EXISTS taken_acquired_at timestamptz;

-- ListUnknown pages through this index in (tenant_id, idempotency_key)
-- order, per tenant or over all tenants, without reading other rows. It
-- holds U rows only, a few among many; an expired U row stays in it until
-- the reaper deletes the row.
CREATE INDEX IF NOT EXISTS records_unknown ON records (tenant_id, idempotency_key) WHERE reason IS NOT NULL;
