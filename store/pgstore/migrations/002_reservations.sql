-- 002_reservations: the guardrail. The application inserts a row here in
-- its own transaction before it calls the provider (Store.Reserve), and
-- records the outcome in the same transaction (Store.Settle). The primary
-- key turns a second execution into a unique_violation.
CREATE TABLE IF NOT EXISTS reservations (
    tenant_id       text        NOT NULL,
    idempotency_key text        NOT NULL,
    fence           bigint      NOT NULL, -- the highest fence that wrote this row
    reserved_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    settled_at      timestamptz,
    outcome         bytea,
    PRIMARY KEY (tenant_id, idempotency_key)
);
