-- list_all (Store.ListUnknown of every tenant): $1 and $2 the last tenant
-- and key of the page before, $3 the limit. Like list_tenant, it walks the
-- partial index records_unknown.
SELECT {record_columns}, tenant_id, idempotency_key FROM S.records
WHERE reason IS NOT NULL AND state = 'U' AND expires_at > clock_timestamp() AND (tenant_id, idempotency_key) > ($1, $2)
ORDER BY tenant_id, idempotency_key LIMIT $3
