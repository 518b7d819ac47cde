-- resolve_deleted (Store.Resolve, the work did not happen): $3 the fence,
-- $4 the claim's owner or '' (an operator).
DELETE FROM S.records
WHERE tenant_id = $1 AND idempotency_key = $2 AND fence = $3 AND {unknown_now}
	AND ($4 = '' OR (claim_owner = $4 AND claim_until > clock_timestamp()))
