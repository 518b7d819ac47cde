-- delete (Store.Delete): $3 the fence, or 0 for any. Returns whether the
-- row it deleted was live.
WITH gone AS (
	DELETE FROM S.records WHERE tenant_id = $1 AND idempotency_key = $2 AND ($3::bigint = 0 OR fence = $3)
	RETURNING {live} OR coalesce(key_until > clock_timestamp(), false) AS live
)
SELECT coalesce(bool_or(live), false) FROM gone
