-- 001_records: the idempotency records of pgstore.Store, and the sequence
-- that mints their fencing tokens. Run with search_path set to the store's
-- schema (pgstore.Migrate does that).

-- One sequence for all keys: nextval never returns a value twice, also
-- after a rollback or a crash, so a fence strictly increases per key,
-- across release, delete and expiry alike.
CREATE SEQUENCE IF NOT EXISTS fence_seq;

CREATE TABLE IF NOT EXISTS records (
    tenant_id       text        NOT NULL,
    idempotency_key text        NOT NULL,
    state           "char"      NOT NULL CHECK (state IN ('P', 'C')), -- PROCESSING or COMPLETED
    owner           text        NOT NULL,
    fence           bigint      NOT NULL,
    fingerprint     text        NOT NULL,
    acquired_at     timestamptz NOT NULL,
    completed_at    timestamptz,
    -- The end of the lease (P) or of the retention (C), by the database's
    -- clock. A row past it is absent to every query, until the reaper
    -- deletes it.
    expires_at      timestamptz NOT NULL,
    status          integer,
    header          bytea,      -- recordcodec.AppendHeader encoding
    body            bytea,
    PRIMARY KEY (tenant_id, idempotency_key)
);

CREATE INDEX IF NOT EXISTS records_expires_at ON records (expires_at);
