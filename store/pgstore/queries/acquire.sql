-- acquire (Store.Acquire): $1 tenant, $2 key, $3 owner, $4 fingerprint, $5
-- the lease, $6 the lease plus the longer of the retention and the key
-- retention (microseconds: when the reaper first looks at the row), $7
-- TakeOver, $8 the label ('' for none: NULL), $9 and $10 the retention and
-- the key retention (microseconds: store.Record.Retention, KeyRetention).
--
-- The INSERT takes the key when it has no row or an expired one, or ($7)
-- takes over a row whose lease ended and whose request is this one (its
-- fingerprint: another request under the key takes nothing over), in one
-- atomic step. When a live row
-- holds the key it returns nothing, and Acquire reads that row with the
-- get query: a second round trip, but a read, next to the row lock and
-- commit that the INSERT pays anyway, and a plain INSERT is cheaper than a
-- CTE that also reads the row on every acquisition. A P row never ends by
-- time ({live}: an older version's P row too, past the end it wrote; this
-- version writes {unsettled_end}): its work may have run, and only settling
-- it (Complete, Release, Resolve, Delete) ends it. One reading of the clock
-- sets the acquisition time, the deadlines and the fence's floor
-- (migrations/005_fence_clock.sql); the fence is above the row's even if
-- someone set the sequence back.
INSERT INTO S.records AS r (tenant_id, idempotency_key, state, owner, fence, fingerprint, acquired_at,
		lease_until, expires_at, reap_at, label, retention_us, key_retention_us)
	SELECT $1, $2, 'P', $3, S.next_fence('S.fence_seq', c.now), $4, c.now, c.now + $5 * interval '1 microsecond',
		{unsettled_end}, c.now + $6 * interval '1 microsecond', nullif($8::text, ''), $9, $10
	FROM (SELECT clock_timestamp() AS now) c
	ON CONFLICT (tenant_id, idempotency_key) DO UPDATE
		SET state = 'P', owner = excluded.owner, fence = greatest(excluded.fence, r.fence + 1), fingerprint = excluded.fingerprint,
			acquired_at = excluded.acquired_at, lease_until = excluded.lease_until, expires_at = excluded.expires_at,
			reap_at = excluded.reap_at, label = excluded.label, retention_us = excluded.retention_us, key_retention_us = excluded.key_retention_us, completed_at = NULL, status = NULL, header = NULL, body = NULL,
			reason = NULL, claim_owner = NULL, claim_until = NULL, key_until = NULL,
			-- A live row is taken over; an expired one was absent.
			taken_fence = CASE WHEN r.state IN ('P', 'U') OR r.expires_at > clock_timestamp() THEN r.fence END,
			taken_acquired_at = CASE WHEN r.state IN ('P', 'U') OR r.expires_at > clock_timestamp() THEN r.acquired_at END
		-- A tombstone (key_until ahead, migrations/006_key_until.sql) is not absent.
		WHERE (r.state = 'C' AND r.expires_at <= clock_timestamp() AND (r.key_until IS NULL OR r.key_until <= clock_timestamp())) OR ($7 AND r.state = 'P' AND coalesce(r.lease_until, r.expires_at) <= clock_timestamp() AND r.fingerprint = $4)
	RETURNING {record_columns}
