-- settle (Store.Settle): $3 the fence, $4 the outcome, in the caller's
-- transaction.
UPDATE S.reservations SET fence = $3, outcome = $4, settled_at = clock_timestamp()
WHERE tenant_id = $1 AND idempotency_key = $2 AND fence <= $3 AND settled_at IS NULL
