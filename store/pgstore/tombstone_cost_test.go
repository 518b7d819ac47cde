package pgstore_test

import (
	"context"
	"os"
	"testing"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store/pgstore"
)

// TestTombstoneCost measures what a tombstone row costs PostgreSQL
// (docs/cost-curve.md, "Tombstones"): pg_total_relation_size of records
// (table, TOAST and indexes) before and after 100,000 rows as the reaper
// leaves a tombstone (COMPLETED, past expires_at, key_until ahead, header
// and body NULL), with keys as the gateway makes them, divided by the
// rows. The rows are inserted as such: a real tombstone is an update,
// whose dead version vacuum reclaims. Opt-in: IDEM_TOMBSTONE_COST=1.
func TestTombstoneCost(t *testing.T) {
	if os.Getenv("IDEM_TOMBSTONE_COST") == "" {
		t.Skip("IDEM_TOMBSTONE_COST=1 runs this measurement")
	}
	pool, schema := testenv.Postgres(t)
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	size := func() int64 {
		var n int64
		if err := pool.QueryRow(ctx, "SELECT pg_total_relation_size('"+schema+".records')").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const n = 100_000
	before := size()
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.records
		(tenant_id, idempotency_key, state, owner, fence, fingerprint, acquired_at, completed_at, expires_at, reap_at, key_until, status)
		SELECT encode(sha256('Bearer sk_live_client'), 'hex'), lpad(i::text, 8, '0') || '-9c2b-4c1e-a5f3-6e0d1b2c3a4f', 'C',
			'OWNERTOKEN26CHARSXXXXXXXXX', 1796451472617956 + i, encode(sha256(i::text::bytea), 'hex'),
			now() - interval '2 hours', now() - interval '2 hours', now() - interval '1 hour',
			now() + interval '30 days', now() + interval '30 days', 201
		FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+schema+".records"); err != nil {
		t.Fatal(err)
	}
	after := size()
	t.Logf("tombstone rows: %d; pg_total_relation_size %d -> %d: %.1f bytes per tombstone", n, before, after, float64(after-before)/n)
}
