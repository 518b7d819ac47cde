-- reservation (Store.Reservation).
SELECT fence, reserved_at, settled_at, outcome FROM S.reservations
WHERE tenant_id = $1 AND idempotency_key = $2
