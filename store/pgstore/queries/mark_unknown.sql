-- mark_unknown (Store.MarkUnknown): $3 owner, $4 fence, $5 the reason, $6
-- and $7 the retention and key retention (the longer of each kept). A
-- repeated MarkUnknown keeps the first reason and time. The row is kept
-- until settled ({live}; expires_at {unsettled_end}, set again for a row
-- an older version wrote, whose lease's end it keeps in lease_until).
UPDATE S.records SET state = 'U', reason = coalesce(reason, $5),
	completed_at = CASE WHEN state = 'U' THEN completed_at ELSE clock_timestamp() END, expires_at = {unsettled_end}, lease_until = coalesce(lease_until, expires_at),
	retention_us = greatest(retention_us, $6), key_retention_us = greatest(key_retention_us, $7)
WHERE tenant_id = $1 AND idempotency_key = $2 AND state IN ('P', 'U') AND owner = $3 AND fence = $4
	AND {live}
