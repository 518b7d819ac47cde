-- get (Store.Get, and Acquire when a live row holds the key).
SELECT {record_columns} FROM S.records
WHERE tenant_id = $1 AND idempotency_key = $2 AND ({live} OR key_until > clock_timestamp())
