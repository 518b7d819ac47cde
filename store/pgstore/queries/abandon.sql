-- abandon (Store.Acquire): an Acquire without TakeOver that found the
-- abandoned row of fence $3 turns it UNKNOWN for reason $4, kept for $5
-- (the longer of the retention and the key retention), unless it changed.
-- The row keeps its own end when that is later: the Acquire's retention
-- may be shorter than the one the row was acquired with (another route's,
-- or a gateway started with a shorter one), and a key forgotten before
-- then runs again.
UPDATE S.records SET state = 'U', reason = $4, completed_at = clock_timestamp(),
	expires_at = greatest(expires_at, clock_timestamp() + $5 * interval '1 microsecond')
WHERE tenant_id = $1 AND idempotency_key = $2 AND fence = $3 AND state = 'P' AND {lease_ended}
	AND expires_at > clock_timestamp()
RETURNING {record_columns}
