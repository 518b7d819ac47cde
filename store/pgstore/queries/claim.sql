-- claim (Store.Claim): $3 the claim's owner, $4 its lease, $5 the reason
-- of an abandoned row. Claim turns an abandoned row UNKNOWN (keeping its
-- end) in the same step as it takes the claim.
UPDATE S.records SET state = 'U', reason = coalesce(reason, $5),
	completed_at = coalesce(completed_at, clock_timestamp()),
	claim_owner = $3, claim_until = clock_timestamp() + $4 * interval '1 microsecond'
WHERE tenant_id = $1 AND idempotency_key = $2 AND {unknown_now}
	AND (claim_until IS NULL OR claim_until <= clock_timestamp())
RETURNING {record_columns}
