-- abandon (Store.Acquire): an Acquire without TakeOver that found the
-- abandoned row of fence $3 turns it UNKNOWN for reason $4, kept until
-- settled (expires_at infinity, as every P and U row: time forgets no key
-- whose work may have run), unless it changed.
UPDATE S.records SET state = 'U', reason = $4, completed_at = clock_timestamp(), expires_at = 'infinity'
WHERE tenant_id = $1 AND idempotency_key = $2 AND fence = $3 AND state = 'P' AND {lease_ended}
	AND expires_at > clock_timestamp()
RETURNING {record_columns}
