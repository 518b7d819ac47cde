package storetest

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
)

// fenceLead is the most a fence may run ahead of the acquisition time, in
// microseconds, by the store's clock. store/pgstore's sequence runs up to
// a second ahead (docs/store-failures.md, "Fences across stores").
const fenceLead = 2 * time.Second

func testFenceIncreases(t *testing.T, s store.Store, advance func(time.Duration)) {
	id := newID(t)
	var fences []int64
	ctx := context.Background()
	ref := mustAcquire(t, s, id, long) // released
	fences = append(fences, ref.Fence)
	if err := s.Release(ctx, ref); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// completed, then expires: its retention ends
	ref = mustAcquire(t, s, id, long)
	fences = append(fences, ref.Fence)
	if err := complete(s, ref, store.Result{}, short); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	advance(3 * short)
	ref = mustAcquire(t, s, id, short) // abandoned, taken over
	fences = append(fences, ref.Fence)
	advance(2 * short)
	ref = mustTakeOver(t, s, id, ref, long) // marked UNKNOWN, resolved as not executed
	fences = append(fences, ref.Fence)
	if err := markUnknown(s, ref, "test", long); err != nil {
		t.Fatalf("MarkUnknown: %v", err)
	}
	if err := s.Resolve(ctx, store.ResolveParams{ID: id, Fence: ref.Fence}); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	ref = mustAcquire(t, s, id, long) // completed, then deleted
	fences = append(fences, ref.Fence)
	if err := complete(s, ref, store.Result{}, long); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if _, err := s.Delete(ctx, store.DeleteParams{ID: id}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	ref = mustAcquire(t, s, id, long)
	fences = append(fences, ref.Fence)
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences %v do not strictly increase (after release, expiry, takeover, resolve, delete)", fences)
		}
	}
	// Back-to-back cycles, faster than any clock tick.
	last := ref.Fence
	if err := s.Release(ctx, ref); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for range 50 {
		r := mustAcquire(t, s, id, long)
		if r.Fence <= last {
			t.Fatalf("fence %d after %d in back-to-back cycles", r.Fence, last)
		}
		last = r.Fence
		if err := s.Release(ctx, r); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

// testFenceClockFloor: a fence is at least the acquisition time in
// microseconds (Record.AcquiredAt, by the store's clock), and at most
// fenceLead above it. Every store of this module mints fences so, which
// makes them comparable across stores: a team that moves from one store
// to another keeps getting fences above those its old store wrote into
// its own tables (the fenced writes of pgstore.FencedExec).
func testFenceClockFloor(t *testing.T, s store.Store, _ func(time.Duration)) {
	for i := range 5 {
		id := newID(t)
		res := acquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: long, Retention: long})
		if !res.Acquired {
			t.Fatalf("Acquire %d of a new key: not acquired", i)
		}
		floor := res.Record.AcquiredAt.UnixMicro()
		if f := res.Record.Fence; f < floor || f > floor+fenceLead.Microseconds() {
			t.Fatalf("fence %d acquired at %v (%d µs); want at least the acquisition time in µs and at most %v above it",
				f, res.Record.AcquiredAt, floor, fenceLead)
		}
		if err := s.Release(context.Background(), store.LeaseRef{ID: id, Owner: res.Record.Owner, Fence: res.Record.Fence}); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}
