-- extend (Store.Extend): $3 owner, $4 fence, $5 the lease, $6 the lease
-- plus the longer of the retention and the key retention. Extend never
-- revives an ended lease.
UPDATE S.records SET lease_until = clock_timestamp() + $5 * interval '1 microsecond',
	expires_at = clock_timestamp() + $6 * interval '1 microsecond'
WHERE tenant_id = $1 AND idempotency_key = $2 AND state = 'P' AND owner = $3 AND fence = $4
	AND coalesce(lease_until, expires_at) > clock_timestamp()
