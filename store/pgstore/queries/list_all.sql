-- list_all (Store.ListUnknown of every tenant): $1 and $2 the last tenant
-- and key of the page before, $3 the limit. The UNKNOWN rows come from
-- the partial index records_unknown, in order; the PROCESSING rows whose
-- lease ended (abandoned, reported UNKNOWN) from records_leases, which
-- holds no other row: its bound is the statement's start, a value an
-- index scan can use, and the row's columns are checked by the clock.
(SELECT {record_columns}, tenant_id, idempotency_key FROM S.records
	WHERE reason IS NOT NULL AND state = 'U' AND (tenant_id, idempotency_key) > ($1, $2)
	ORDER BY tenant_id, idempotency_key LIMIT $3)
UNION ALL
(SELECT {record_columns}, tenant_id, idempotency_key FROM S.records
	WHERE state = 'P' AND lease_until <= statement_timestamp()
		AND (tenant_id, idempotency_key) > ($1, $2)
	ORDER BY tenant_id, idempotency_key LIMIT $3)
ORDER BY tenant_id, idempotency_key LIMIT $3
