-- release (Store.Release): deletes the caller's row ($3 owner, $4 fence):
-- PROCESSING, or UNKNOWN for reason $5 (abandoned: its lease ended, nobody
-- said anything about the work) while no reconciliation claim holds it.
DELETE FROM S.records
WHERE tenant_id = $1 AND idempotency_key = $2 AND owner = $3 AND fence = $4
	AND (state = 'P' OR (state = 'U' AND reason = $5 AND (claim_until IS NULL OR claim_until <= clock_timestamp())))
	AND {live}
