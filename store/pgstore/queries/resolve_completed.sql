-- resolve_completed (Store.Resolve, the work happened): $3 the fence, $4
-- the claim's owner or '' (an operator), $5 the retention, $6-$8 the
-- response, $9 the key retention (a tombstone when above the retention).
UPDATE S.records SET state = 'C', completed_at = clock_timestamp(),
	expires_at = clock_timestamp() + $5 * interval '1 microsecond', status = $6, header = $7, body = $8,
	reason = NULL, claim_owner = NULL, claim_until = NULL,
	key_until = CASE WHEN $9::bigint > $5::bigint THEN clock_timestamp() + $9 * interval '1 microsecond' END
WHERE tenant_id = $1 AND idempotency_key = $2 AND fence = $3 AND {unknown_now}
	AND ($4 = '' OR (claim_owner = $4 AND claim_until > clock_timestamp()))
