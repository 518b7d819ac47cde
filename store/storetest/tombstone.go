package storetest

import (
	"context"
	"crypto/rand"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
)

// Tombstones (store.StateExpired): a COMPLETED record whose Complete had a
// KeyRetention above its Retention outlives its result as a compact record
// that no retry can run past.

// testTombstone: when the retention ends the record becomes EXPIRED, with
// the fingerprint, fence, completion time and status and without header
// or body; Acquire returns it (whatever the fingerprint) and acquires
// nothing; the old owner cannot revive it; when the key retention ends
// the key is absent and the next acquisition gets a higher fence.
func testTombstone(t *testing.T, s store.Store, advance func(time.Duration)) {
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	res := store.Result{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ch_1"}`)}
	if err := s.Complete(context.Background(), store.CompleteParams{LeaseRef: ref, Result: res, Retention: short, KeyRetention: short + hold}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	completed, ok := get(t, s, id)
	if !ok {
		t.Fatal("Get right after Complete: not found")
	}
	advance(2 * short)
	check := func(what string, r store.Record) {
		t.Helper()
		if r.State != store.StateExpired || r.Fingerprint != "fp" || r.Fence != ref.Fence || r.ID != id {
			t.Fatalf("%s = %+v; want EXPIRED with fingerprint fp and fence %d", what, r, ref.Fence)
		}
		if r.Result == nil || r.Result.Status != 201 || len(r.Result.Body) != 0 || len(r.Result.Header) != 0 {
			t.Fatalf("%s result = %+v; want status 201 alone", what, r.Result)
		}
		// A layered store's mirror stamps its copy a round trip after the
		// authority: the same completion, within a second.
		if d := r.CompletedAt.Sub(completed.CompletedAt); d < -time.Second || d > time.Second {
			t.Fatalf("%s completed at %v; want %v, the completion's", what, r.CompletedAt, completed.CompletedAt)
		}
		if r.TTL <= 0 || r.TTL > hold {
			t.Fatalf("%s TTL = %v; want in (0, %v], the key retention left", what, r.TTL, hold)
		}
	}
	rec, ok := get(t, s, id)
	if !ok {
		t.Fatal("Get after the retention, within the key retention: not found; want the tombstone")
	}
	check("Get of a tombstone", rec)
	for _, fp := range []string{"fp", "other"} {
		got := acquire(t, s, id, fp, long)
		if got.Acquired || got.Takeover != nil {
			t.Fatalf("Acquire (fingerprint %s) of a tombstone = %+v; want not acquired", fp, got)
		}
		check("Acquire of a tombstone", got.Record)
	}
	wantLost(t, "Complete by the owner of a tombstone", s.Complete(context.Background(), store.CompleteParams{LeaseRef: ref, Result: res, Retention: long}))
	wantLost(t, "Release by the owner of a tombstone", s.Release(context.Background(), ref))
	check("the tombstone after its owner's late calls", mustGet(t, s, id))

	advance(hold)
	if rec, ok := get(t, s, id); ok {
		t.Fatalf("Get after the key retention = %+v; want absent", rec)
	}
	if next := mustAcquire(t, s, id, long); next.Fence <= ref.Fence {
		t.Fatalf("fence after the tombstone = %d; want above %d", next.Fence, ref.Fence)
	}
}

// testResolvedKeepsTombstone: an UNKNOWN record resolved with a result and
// a key retention becomes a tombstone when its retention ends, as a
// completed one does.
func testResolvedKeepsTombstone(t *testing.T, s store.Store, advance func(time.Duration)) {
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	if err := s.MarkUnknown(context.Background(), store.MarkUnknownParams{LeaseRef: ref, Reason: "timeout", Retention: long}); err != nil {
		t.Fatalf("MarkUnknown: %v", err)
	}
	if err := s.Resolve(context.Background(), store.ResolveParams{ID: id, Fence: ref.Fence, Result: &store.Result{Status: 202},
		Retention: short, KeyRetention: long}); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	advance(2 * short)
	rec := mustGet(t, s, id)
	if rec.State != store.StateExpired || rec.Fence != ref.Fence || rec.Result == nil || rec.Result.Status != 202 {
		t.Fatalf("Get after the retention of a resolved key = %+v; want EXPIRED, fence %d, status 202", rec, ref.Fence)
	}
	if got := acquire(t, s, id, "fp", long); got.Acquired || got.Record.State != store.StateExpired {
		t.Fatalf("Acquire of the resolved key's tombstone = %+v; want not acquired, EXPIRED", got)
	}
}

// testNoTombstoneWithoutKeyRetention: a key retention not above the
// retention keeps nothing past the result, as before tombstones.
func testNoTombstoneWithoutKeyRetention(t *testing.T, s store.Store, advance func(time.Duration)) {
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	if err := s.Complete(context.Background(), store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 200}, Retention: short, KeyRetention: short}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	advance(2 * short)
	if rec, ok := get(t, s, id); ok {
		t.Fatalf("Get after the retention, key retention equal to it = %+v; want absent", rec)
	}
	mustAcquire(t, s, id, long)
}

// testDeleteTombstone: an operator's Delete removes a tombstone (by any
// fence, or by its own), and the key runs again.
func testDeleteTombstone(t *testing.T, s store.Store, advance func(time.Duration)) {
	ids := []store.ID{newID(t), newID(t)}
	var refs []store.LeaseRef
	for _, id := range ids {
		ref := mustAcquire(t, s, id, long)
		if err := s.Complete(context.Background(), store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 200}, Retention: short, KeyRetention: long}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		refs = append(refs, ref)
	}
	advance(2 * short)
	for i, fence := range []int64{0, refs[1].Fence} {
		if rec := mustGet(t, s, ids[i]); rec.State != store.StateExpired {
			t.Fatalf("Get = %+v; want EXPIRED", rec)
		}
		if ok, err := s.Delete(context.Background(), store.DeleteParams{ID: ids[i], Fence: fence}); err != nil || !ok {
			t.Fatalf("Delete(fence %d) of a tombstone = %v, %v; want true", fence, ok, err)
		}
		if rec, ok := get(t, s, ids[i]); ok {
			t.Fatalf("Get after Delete = %+v; want absent", rec)
		}
		mustAcquireWith(t, s, store.AcquireParams{ID: ids[i], Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: long, Retention: long})
	}
}

func mustGet(t *testing.T, s store.Store, id store.ID) store.Record {
	t.Helper()
	rec, ok := get(t, s, id)
	if !ok {
		t.Fatalf("Get(%v): not found", id)
	}
	return rec
}

// testUnsettledNeverExpires: a record whose outcome may be unknown is
// never forgotten by time, whatever the lease, retention and key retention
// its calls gave: an UNKNOWN record (marked so) and a PROCESSING record
// whose owner is gone (reported UNKNOWN, abandoned) are both still there
// long past all of them, with a TTL of 0 (kept until settled); an Acquire,
// with or without TakeOver, acquires neither; only settling ends them: the
// late Complete of their owner lands, and the COMPLETED record then lives
// for that Complete's retention and ends. A store that forgot them let the
// work run again on the next retry (an UNKNOWN key "never runs again until
// reconciled or resolved").
func testUnsettledNeverExpires(t *testing.T, s store.Store, advance func(time.Duration)) {
	ctx := context.Background()
	marked, abandoned := newID(t), newID(t)
	life := 4 * short // lease + retention + key retention of every call below
	p := func(id store.ID) store.AcquireParams {
		return store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: short, Retention: short, KeyRetention: 2 * short}
	}
	refs := map[store.ID]store.LeaseRef{marked: mustAcquireWith(t, s, p(marked)), abandoned: mustAcquireWith(t, s, p(abandoned))}
	if err := s.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: refs[marked], Reason: "timeout", Retention: short, KeyRetention: 2 * short}); err != nil {
		t.Fatalf("MarkUnknown: %v", err)
	}
	reasons := map[store.ID]string{marked: "timeout", abandoned: store.ReasonAbandoned}
	wantKept := func(when string) {
		t.Helper()
		for id, ref := range refs {
			rec, ok := get(t, s, id)
			if !ok || rec.State != store.StateUnknown || rec.Reason != reasons[id] || rec.Fence != ref.Fence || rec.Owner != ref.Owner || rec.TTL != 0 {
				t.Fatalf("Get(%v) %s = %+v (found %v); want UNKNOWN %q, owner %s, fence %d, TTL 0 (kept until settled)",
					id, when, rec, ok, reasons[id], ref.Owner, ref.Fence)
			}
			if got := listUnknown(t, s, store.ListParams{Tenant: id.Tenant}); len(got) != 1 || got[0].ID != id {
				t.Fatalf("ListUnknown(%s) %s = %+v; want %v", id.Tenant, when, got, id)
			}
		}
	}
	advance(10 * life)
	wantKept("far past the lease, retention and key retention")

	for _, takeOver := range []bool{false, true} {
		for id, ref := range refs {
			res := acquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: short, Retention: short,
				KeyRetention: 2 * short, TakeOver: takeOver})
			if r := res.Record; res.Acquired || res.Takeover != nil || r.State != store.StateUnknown || r.Fence != ref.Fence || r.Reason != reasons[id] || r.TTL != 0 {
				t.Fatalf("Acquire (TakeOver %v) of %v far past its life = %+v; want not acquired, UNKNOWN %q, fence %d, TTL 0",
					takeOver, id, res, reasons[id], ref.Fence)
			}
		}
	}
	advance(10 * life) // past the Acquires' own retentions too
	wantKept("far past the retention of the Acquires that found them")

	want := store.Result{Status: 201, Body: []byte("late but known")}
	for id, ref := range refs {
		if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: want, Retention: hold}); err != nil {
			t.Fatalf("late Complete by the owner of %v = %v; want nil", id, err)
		}
		rec := mustGet(t, s, id)
		checkCompleted(t, rec, want)
		if rec.Fence != ref.Fence || rec.Owner != ref.Owner || rec.TTL <= 0 || rec.TTL > hold {
			t.Fatalf("late completed record = %+v; want owner %s, fence %d, TTL in (0, %v], the retention", rec, ref.Owner, ref.Fence, hold)
		}
		if got := listUnknown(t, s, store.ListParams{Tenant: id.Tenant}); len(got) != 0 {
			t.Fatalf("ListUnknown after the late Complete = %+v; want empty", got)
		}
	}
	advance(hold + short)
	for id, ref := range refs {
		if rec, ok := get(t, s, id); ok {
			t.Fatalf("Get(%v) after the completed record's retention = %+v; want absent", id, rec)
		}
		if next := mustAcquire(t, s, id, long); next.Fence <= ref.Fence {
			t.Fatalf("fence after the completed record ended = %d; want above %d", next.Fence, ref.Fence)
		}
	}
}
