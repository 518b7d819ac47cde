-- extend (Store.Extend): $3 owner, $4 fence, $5 the lease, $6 and $7 the
-- retention and key retention (the longer of each kept). Extend never
-- revives an ended lease. The row never ends by time (expires_at
-- {unsettled_end}, set again for a row an older version wrote).
UPDATE S.records SET lease_until = clock_timestamp() + $5 * interval '1 microsecond', expires_at = {unsettled_end},
	retention_us = greatest(retention_us, $6), key_retention_us = greatest(key_retention_us, $7)
WHERE tenant_id = $1 AND idempotency_key = $2 AND state = 'P' AND owner = $3 AND fence = $4
	AND coalesce(lease_until, expires_at) > clock_timestamp()
