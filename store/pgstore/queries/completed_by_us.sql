-- completed_by_us (Store.Complete): whether the row is COMPLETED by owner
-- $3 under fence $4, after a complete that matched no row.
SELECT EXISTS (SELECT 1 FROM S.records
	WHERE tenant_id = $1 AND idempotency_key = $2 AND state = 'C' AND owner = $3 AND fence = $4
		AND expires_at > clock_timestamp())
