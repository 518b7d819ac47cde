-- complete (Store.Complete): $3 owner, $4 fence, $5 the retention, $6-$8
-- the response, $9 the key retention (above the retention, it leaves a
-- tombstone).
--
-- One plain UPDATE: when it matches no row, Complete asks completed_by_us
-- whether a retry's first try landed. The lease's end is not checked: a
-- late completion of a row still the caller's, PROCESSING or UNKNOWN, is
-- the truth, however late: a P or U row never ends by time. reap_at is
-- left alone (reap.sql looks at an unsettled row hourly).
UPDATE S.records SET state = 'C', completed_at = clock_timestamp(),
	expires_at = clock_timestamp() + $5 * interval '1 microsecond', status = $6, header = $7, body = $8,
	reason = NULL, claim_owner = NULL, claim_until = NULL,
	key_until = CASE WHEN $9::bigint > $5::bigint THEN clock_timestamp() + $9 * interval '1 microsecond' END
WHERE tenant_id = $1 AND idempotency_key = $2 AND state IN ('P', 'U') AND owner = $3 AND fence = $4
	AND {live}
