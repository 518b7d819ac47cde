package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgstore"
)

// TestReaperDeletesExpiredRows is issue 22's item 19: only the gateway
// called Store.Reap, so a library user's table grew forever. The store
// reaps by itself, in passes of bounded statements until no due row is
// left: 2,500 expired rows (more than one statement's 1,000) are deleted
// by its reaper alone, and the live ones stay.
func TestReaperDeletesExpiredRows(t *testing.T) {
	pool, schema := testenv.Postgres(t)
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	const expired, live = 2500, 10
	// Rows whose life ended an hour ago, as the reaper of a stopped
	// process would have left them.
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.records
		(tenant_id, idempotency_key, state, owner, fence, fingerprint, acquired_at, completed_at, expires_at, reap_at, status, header, body)
		SELECT 't', 'expired-' || i, 'C', 'o', i, 'fp', now() - interval '2 hours', now() - interval '2 hours',
			now() - interval '1 hour', now() - interval '1 hour', 200, '', ''
		FROM generate_series(1, $1) i`, expired); err != nil {
		t.Fatal(err)
	}
	passes := make(chan int, 100)
	s, err := pgstore.NewWithReapHook(pool, &pgstore.Options{Schema: schema, ReapInterval: 10 * time.Millisecond}, func(looked int, err error) {
		if err != nil {
			t.Errorf("reaper pass: %v", err)
		}
		select {
		case passes <- looked:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for i := range live {
		acquireFence(t, s, store.ID{Tenant: "t", Key: "live-" + string(rune('a'+i))})
	}
	deadline := time.After(30 * time.Second)
	for looked := 0; looked < expired; {
		select {
		case n := <-passes:
			looked += n
		case <-deadline:
			t.Fatalf("the reaper looked at %d rows in 30s; want the %d expired ones", looked, expired)
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".records").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != live {
		t.Fatalf("%d rows left after the reaper's passes; want the %d live ones", rows, live)
	}
}

// TestCloseStopsReaper: New starts the reaper's goroutine unless
// ReapInterval is negative, and Close stops it (goleak in TestMain checks
// every test; this one checks each step).
func TestCloseStopsReaper(t *testing.T) {
	pool, schema := testenv.Postgres(t)
	if err := pgstore.Migrate(context.Background(), pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()
	off, err := pgstore.New(pool, &pgstore.Options{Schema: schema, ReapInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := goleak.Find(before); err != nil {
		t.Fatalf("a store with its reaper off started a goroutine: %v", err)
	}
	off.Close()
	on, err := pgstore.New(pool, &pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := goleak.Find(before); err == nil || !strings.Contains(err.Error(), "startReaper") {
		t.Fatalf("no reaper goroutine after New: %v", err)
	}
	on.Close()
	if err := goleak.Find(before); err != nil {
		t.Fatalf("the reaper outlived Close: %v", err)
	}
	on.Close() // again: nothing to do
}

// TestReaperCompactsTombstones: a COMPLETED row past its retention whose
// key retention goes on (key_until, migrations/006_key_until.sql) is not
// deleted by the reaper: its header and body are dropped, and it stays a
// tombstone (EXPIRED) until key_until, when the reaper deletes it.
func TestReaperCompactsTombstones(t *testing.T) {
	pool, schema := testenv.Postgres(t)
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, &pgstore.Options{Schema: schema, ReapInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.records
		(tenant_id, idempotency_key, state, owner, fence, fingerprint, acquired_at, completed_at, expires_at, reap_at, key_until, status, header, body)
		VALUES ('t', 'tomb', 'C', 'o', 7, 'fp', now() - interval '2 hours', now() - interval '2 hours',
			now() - interval '1 hour', now() - interval '1 hour', now() + interval '1 day', 201, 'h', 'a large body')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reap(ctx, 100); err != nil {
		t.Fatal(err)
	}
	var body []byte
	if err := pool.QueryRow(ctx, "SELECT body FROM "+schema+".records WHERE idempotency_key = 'tomb'").Scan(&body); err != nil {
		t.Fatalf("the tombstone's row after a reap: %v", err)
	}
	if body != nil {
		t.Errorf("the tombstone keeps its body %q; want it dropped", body)
	}
	rec, err := s.Get(ctx, store.ID{Tenant: "t", Key: "tomb"})
	if err != nil || rec.State != store.StateExpired || rec.Fence != 7 || rec.Result == nil || rec.Result.Status != 201 {
		t.Fatalf("Get = %+v, %v; want EXPIRED, fence 7, status 201", rec, err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+schema+".records SET key_until = now() - interval '1 second', reap_at = now() - interval '1 second'"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reap(ctx, 100); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".records").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows (%v) after the key retention ended; want none", n, err)
	}
}
