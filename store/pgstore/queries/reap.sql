-- reap: the reaper's statement (Store.Reap). S. is the store's schema.
-- $1: the most rows it looks at. Returns how many it deleted and how many
-- it moved.
--
-- It takes up to $1 due rows (reap_at passed, see migrations/003_reap_at.sql),
-- deletes those that have expired and moves the others to their end. A P
-- or U row is never deleted, whatever its expires_at ({unsettled_end},
-- or an older version's): its work may have run, and only settling it ends it.
-- It is moved an hour ahead (its expires_at set to {unsettled_end} and
-- its lease's end kept in lease_until, for a row an older version wrote): Complete and Resolve leave reap_at alone, so
-- that they change no indexed column (TestNoIndexOnCompletedColumns), and
-- a row settled after its first look is deleted or moved to its end at
-- most an hour late; queries treat it as absent from its end on. SKIP
-- LOCKED lets several reapers, and acquisitions taking over an expired row,
-- run at once without waiting for each other. Both branches compare with
-- one instant, the statement's start, so no row is both deleted and moved;
-- a row changed meanwhile is checked again in its latest version.
WITH due AS (
	SELECT tenant_id, idempotency_key FROM S.records
	WHERE reap_at <= statement_timestamp()
	ORDER BY reap_at
	LIMIT $1 FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM S.records r USING due
	WHERE r.tenant_id = due.tenant_id AND r.idempotency_key = due.idempotency_key
		AND r.state = 'C' AND r.expires_at <= statement_timestamp() AND (r.key_until IS NULL OR r.key_until <= statement_timestamp())
	RETURNING 1
), moved AS (
	-- A row past expires_at with key_until ahead becomes its tombstone:
	-- header, body and label dropped, reaped again at key_until.
	UPDATE S.records r SET reap_at = CASE WHEN r.state <> 'C' THEN statement_timestamp() + interval '1 hour'
			WHEN r.expires_at > statement_timestamp() THEN r.expires_at ELSE r.key_until END,
		expires_at = CASE WHEN r.state <> 'C' THEN {unsettled_end} ELSE r.expires_at END,
		lease_until = CASE WHEN r.state <> 'C' THEN coalesce(r.lease_until, r.expires_at) ELSE r.lease_until END,
		header = CASE WHEN r.state <> 'C' OR r.expires_at > statement_timestamp() THEN r.header END,
		body = CASE WHEN r.state <> 'C' OR r.expires_at > statement_timestamp() THEN r.body END,
		label = CASE WHEN r.state <> 'C' OR r.expires_at > statement_timestamp() THEN r.label END
	FROM due
	WHERE r.tenant_id = due.tenant_id AND r.idempotency_key = due.idempotency_key
		AND (r.state <> 'C' OR r.expires_at > statement_timestamp() OR r.key_until > statement_timestamp())
	RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM moved)
