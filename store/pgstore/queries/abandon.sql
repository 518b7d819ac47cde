-- abandon (Store.Acquire): an Acquire without TakeOver that found the
-- abandoned row of fence $3 turns it UNKNOWN for reason $4, kept until
-- settled (as every P and U row: time forgets no key whose work may have
-- run; expires_at {unsettled_end}), unless it changed.
UPDATE S.records SET state = 'U', reason = $4, completed_at = clock_timestamp(), expires_at = {unsettled_end},
	lease_until = coalesce(lease_until, expires_at)
WHERE tenant_id = $1 AND idempotency_key = $2 AND fence = $3 AND state = 'P' AND {lease_ended}
	AND {live}
RETURNING {record_columns}
