-- list_tenant (Store.ListUnknown of one tenant): $1 tenant, $2 the last
-- key of the page before, $3 the limit. Keyset pagination over the
-- UNKNOWN rows of the partial index records_unknown (reason IS NOT NULL
-- is its predicate) and the PROCESSING rows whose lease ended, from
-- records_leases, as list_all.
(SELECT {record_columns}, tenant_id, idempotency_key FROM S.records
	WHERE reason IS NOT NULL AND state = 'U' AND tenant_id = $1 AND idempotency_key > $2
	ORDER BY idempotency_key LIMIT $3)
UNION ALL
(SELECT {record_columns}, tenant_id, idempotency_key FROM S.records
	WHERE state = 'P' AND lease_until <= statement_timestamp()
		AND tenant_id = $1 AND idempotency_key > $2
	ORDER BY idempotency_key LIMIT $3)
ORDER BY idempotency_key LIMIT $3
