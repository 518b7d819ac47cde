-- claim (Store.Claim): $3 the claim's owner, $4 its lease, $5 the reason
-- of an abandoned row.
--
-- Claim decides on the row it returns, in one statement: cur locks the
-- live row (its newest version) and says whether it is free to claim; won
-- takes the claim on it, turning an abandoned row UNKNOWN (kept until
-- settled). The answer is won's row, or cur's, with the decision in the last
-- column.
WITH cur AS (
	SELECT {record_columns}, {unknown_now} AND (claim_until IS NULL OR claim_until <= clock_timestamp()) AS free
	FROM S.records WHERE tenant_id = $1 AND idempotency_key = $2 AND {live} FOR UPDATE
), won AS (
	UPDATE S.records SET state = 'U', reason = coalesce(reason, $5),
		completed_at = coalesce(completed_at, clock_timestamp()), expires_at = {unsettled_end},
		lease_until = coalesce(lease_until, expires_at),
		claim_owner = $3, claim_until = clock_timestamp() + $4 * interval '1 microsecond'
	WHERE tenant_id = $1 AND idempotency_key = $2 AND (SELECT free FROM cur)
	RETURNING {record_columns}, true
)
SELECT * FROM won UNION ALL SELECT * FROM cur WHERE NOT free
