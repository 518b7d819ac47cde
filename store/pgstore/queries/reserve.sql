-- reserve (Store.Reserve): $3 the fence, in the caller's transaction.
INSERT INTO S.reservations (tenant_id, idempotency_key, fence) VALUES ($1, $2, $3)
