-- mark_unknown (Store.MarkUnknown): $3 owner, $4 fence, $5 the reason, $6
-- the longer of the retention and the key retention. A repeated
-- MarkUnknown keeps the first reason, time and end.
UPDATE S.records SET state = 'U', reason = coalesce(reason, $5),
	completed_at = CASE WHEN state = 'U' THEN completed_at ELSE clock_timestamp() END,
	expires_at = CASE WHEN state = 'U' THEN expires_at ELSE clock_timestamp() + $6 * interval '1 microsecond' END
WHERE tenant_id = $1 AND idempotency_key = $2 AND state IN ('P', 'U') AND owner = $3 AND fence = $4
	AND expires_at > clock_timestamp()
