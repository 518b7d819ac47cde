package storetest

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
)

// The cases of the fourth state, UNKNOWN: abandoned leases, takeovers,
// MarkUnknown, the reconciliation claim, Resolve and ListUnknown.

func markUnknown(s store.Store, ref store.LeaseRef, reason string, retention time.Duration) error {
	return s.MarkUnknown(context.Background(), store.MarkUnknownParams{LeaseRef: ref, Reason: reason, Retention: retention})
}

// mustUnknown acquires the absent key id and marks it UNKNOWN, kept for
// retention.
func mustUnknown(t *testing.T, s store.Store, id store.ID, retention time.Duration) store.LeaseRef {
	t.Helper()
	ref := mustAcquire(t, s, id, long)
	if err := markUnknown(s, ref, "test", retention); err != nil {
		t.Fatalf("MarkUnknown(%v): %v", id, err)
	}
	return ref
}

// mustTakeOver acquires id, whose lease held by stale ended, with TakeOver,
// and checks what the store reports of the attempt it took over.
func mustTakeOver(t *testing.T, s store.Store, id store.ID, stale store.LeaseRef, lease time.Duration) store.LeaseRef {
	t.Helper()
	res := acquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: lease, Retention: long, TakeOver: true})
	if !res.Acquired || res.Record.State != store.StateProcessing {
		t.Fatalf("Acquire with TakeOver of an ended lease = %+v; want acquired", res)
	}
	if res.Record.Fence <= stale.Fence {
		t.Fatalf("takeover fence %d is not above the stale fence %d", res.Record.Fence, stale.Fence)
	}
	if res.Takeover == nil || res.Takeover.Fence != stale.Fence || res.Takeover.AcquiredAt.IsZero() {
		t.Fatalf("Acquire with TakeOver reports %+v; want the previous fence %d and its acquisition time", res.Takeover, stale.Fence)
	}
	return store.LeaseRef{ID: id, Owner: res.Record.Owner, Fence: res.Record.Fence}
}

func claim(t *testing.T, s store.Store, id store.ID, owner string, lease time.Duration) store.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), store.ClaimParams{ID: id, Owner: owner, LeaseDuration: lease})
	if err != nil {
		t.Fatalf("Claim(%v): %v", id, err)
	}
	return res
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s = %v; want %v", what, err, want)
	}
}

// wantUnknown checks that id is UNKNOWN, made by ref, for reason.
func wantUnknown(t *testing.T, s store.Store, ref store.LeaseRef, reason string) store.Record {
	t.Helper()
	rec, ok := get(t, s, ref.ID)
	if !ok || rec.State != store.StateUnknown || rec.Owner != ref.Owner || rec.Fence != ref.Fence || rec.Reason != reason || rec.Result != nil {
		t.Fatalf("Get(%v) = %+v (found %v); want UNKNOWN, owner %s, fence %d, reason %q, no result", ref.ID, rec, ok, ref.Owner, ref.Fence, reason)
	}
	return rec
}

// near reports whether two times the store reported are the same instant,
// give or take the store's resolution.
func near(a, b time.Time) bool {
	d := a.Sub(b)
	return d > -time.Millisecond && d < time.Millisecond
}

// testAbandonedBecomesUnknown: a PROCESSING record whose lease ended is
// reported UNKNOWN by Get (no write), and an Acquire without TakeOver
// turns it UNKNOWN, whatever its fingerprint, keeping the record's own
// life when the Acquire's retention is shorter: that Acquire may be
// another route's, or a gateway's started with a shorter retention, and a
// key forgotten early runs again (found by SIGKILLing idem serve with
// --key-retention 30s and retrying on one started without it: the second
// retry ran the request again).
func testAbandonedBecomesUnknown(t *testing.T, s store.Store, advance func(time.Duration)) {
	ctx := context.Background()
	id := newID(t)
	first := acquire(t, s, id, "fp-one", short)
	ref := store.LeaseRef{ID: id, Owner: first.Record.Owner, Fence: first.Record.Fence}
	advance(2 * short)
	wantUnknown(t, s, ref, store.ReasonAbandoned)
	if page := listUnknown(t, s, store.ListParams{Tenant: id.Tenant}); len(page) != 1 || page[0].ID != id {
		t.Fatalf("ListUnknown(%s) = %+v; want the abandoned key", id.Tenant, page)
	}

	res := acquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp-two", LeaseDuration: long, Retention: hold})
	r := res.Record
	if res.Acquired || res.Takeover != nil {
		t.Fatalf("Acquire without TakeOver of an ended lease = %+v; want not acquired, no takeover", res)
	}
	if r.State != store.StateUnknown || r.Reason != store.ReasonAbandoned || r.ID != id || r.Owner != ref.Owner || r.Fence != ref.Fence || r.Fingerprint != "fp-one" {
		t.Fatalf("Acquire without TakeOver of an ended lease saw %+v; want UNKNOWN %q keeping owner %s, fence %d, fingerprint fp-one", r, store.ReasonAbandoned, ref.Owner, ref.Fence)
	}
	if !near(r.AcquiredAt, first.Record.AcquiredAt) || r.CompletedAt.Before(r.AcquiredAt) {
		t.Fatalf("times = acquired %v, completed %v; want acquired %v kept, completed after it", r.AcquiredAt, r.CompletedAt, first.Record.AcquiredAt)
	}
	if r.TTL != 0 {
		t.Fatalf("TTL = %v; want 0: an UNKNOWN record is kept until settled, whatever the Acquire's retention", r.TTL)
	}
	if got := listUnknown(t, s, store.ListParams{Tenant: id.Tenant}); len(got) != 1 || got[0].ID != id {
		t.Fatalf("ListUnknown(%s) = %+v; want the key turned UNKNOWN", id.Tenant, got)
	}

	// UNKNOWN stays UNKNOWN: a retry with or without TakeOver never runs it.
	for _, takeOver := range []bool{false, true} {
		res = acquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp-one", LeaseDuration: long, Retention: long, TakeOver: takeOver})
		if res.Acquired || res.Takeover != nil || res.Record.State != store.StateUnknown || res.Record.Fence != ref.Fence {
			t.Fatalf("Acquire (TakeOver %v) of an UNKNOWN key = %+v; want the UNKNOWN record", takeOver, res)
		}
	}
	// The owner's lease is over: it cannot renew it (it may still release
	// the key, see testReleaseOwnAbandoned).
	wantLost(t, "Extend of an UNKNOWN record", s.Extend(ctx, store.ExtendParams{LeaseRef: ref, LeaseDuration: long, Retention: long}))
	wantUnknown(t, s, ref, store.ReasonAbandoned)

	// It outlives the Acquire's retention (and any other: see
	// testUnsettledNeverExpires).
	advance(hold + short)
	wantUnknown(t, s, ref, store.ReasonAbandoned)
}

// testTakeOver: an Acquire with TakeOver of an ended lease, by the same
// request (its fingerprint), acquires the key with a higher fence and
// reports the attempt it took over; it never takes over a lease that
// still holds, nor another request's: for that one the attempt's outcome
// is unknown, and stays so once seen.
func testTakeOver(t *testing.T, s store.Store, advance func(time.Duration)) {
	live := newID(t)
	holder := mustAcquire(t, s, live, long)
	res := acquireWith(t, s, store.AcquireParams{ID: live, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: long, Retention: long, TakeOver: true})
	if res.Acquired || res.Takeover != nil || res.Record.State != store.StateProcessing || res.Record.Owner != holder.Owner {
		t.Fatalf("Acquire with TakeOver of a live lease = %+v; want the holder's PROCESSING record", res)
	}

	other := newID(t)
	ended := acquire(t, s, other, "fp", short)
	id := newID(t)
	first := acquire(t, s, id, "fp", short)
	stale := store.LeaseRef{ID: id, Owner: first.Record.Owner, Fence: first.Record.Fence}
	advance(2 * short)
	// Another request under the key takes nothing over: the ended attempt
	// was not its own. It gets the record, UNKNOWN (abandoned), to answer a
	// mismatch with, as an Acquire without TakeOver would, and the key is
	// UNKNOWN from then on: the same request's takeover, later, finds it so
	// (what a caller was told stays true).
	res = acquireWith(t, s, store.AcquireParams{ID: other, Owner: rand.Text(), Fingerprint: "fp-other", LeaseDuration: long, Retention: long, TakeOver: true})
	if res.Acquired || res.Takeover != nil || res.Record.State != store.StateUnknown || res.Record.Fingerprint != "fp" || res.Record.Fence != ended.Record.Fence {
		t.Fatalf("Acquire with TakeOver of an ended lease by another request = %+v; want not acquired, the ended attempt's record, UNKNOWN", res)
	}
	wantUnknown(t, s, store.LeaseRef{ID: other, Owner: ended.Record.Owner, Fence: ended.Record.Fence}, store.ReasonAbandoned)
	res = acquireWith(t, s, store.AcquireParams{ID: other, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: long, Retention: long, TakeOver: true})
	if res.Acquired || res.Record.State != store.StateUnknown {
		t.Fatalf("Acquire with TakeOver by the ended attempt's request, after another request found it UNKNOWN = %+v; want not acquired, UNKNOWN", res)
	}
	res = acquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: long, Retention: long, TakeOver: true})
	if !res.Acquired || res.Takeover == nil {
		t.Fatalf("Acquire with TakeOver of an ended lease = %+v; want acquired with a takeover", res)
	}
	if tk := res.Takeover; tk.Fence != stale.Fence || !near(tk.AcquiredAt, first.Record.AcquiredAt) {
		t.Fatalf("Takeover = %+v; want fence %d, acquired at %v", tk, stale.Fence, first.Record.AcquiredAt)
	}
	if r := res.Record; r.State != store.StateProcessing || r.Fence <= stale.Fence || r.Owner == stale.Owner || r.Reason != "" {
		t.Fatalf("record after the takeover = %+v; want a new PROCESSING record with a fence above %d", r, stale.Fence)
	}
	if r, ok := get(t, s, id); !ok || r.State != store.StateProcessing || r.Fence != res.Record.Fence {
		t.Fatalf("Get after the takeover = %+v (found %v); want the new owner's PROCESSING record", r, ok)
	}
}

// testLateOwner: the owner's word that arrives after its lease ended, on
// a record still its own (nobody took over), is accepted: Complete,
// MarkUnknown and Release.
func testLateOwner(t *testing.T, s store.Store, advance func(time.Duration)) {
	ctx := context.Background()
	completed, marked, released := newID(t), newID(t), newID(t)
	refs := map[store.ID]store.LeaseRef{}
	for _, id := range []store.ID{completed, marked, released} {
		refs[id] = mustAcquire(t, s, id, short)
	}
	advance(2 * short)

	want := store.Result{Status: 200, Body: []byte("late")}
	if err := complete(s, refs[completed], want, long); err != nil {
		t.Fatalf("late Complete on the owner's own record = %v; want nil", err)
	}
	rec, _ := get(t, s, completed)
	checkCompleted(t, rec, want)
	if rec.Owner != refs[completed].Owner || rec.Fence != refs[completed].Fence {
		t.Fatalf("late completed record = %+v; want owner and fence kept", rec)
	}

	if err := markUnknown(s, refs[marked], "timeout", long); err != nil {
		t.Fatalf("late MarkUnknown on the owner's own record = %v; want nil", err)
	}
	wantUnknown(t, s, refs[marked], "timeout")

	if err := s.Release(ctx, refs[released]); err != nil {
		t.Fatalf("late Release on the owner's own record = %v; want nil", err)
	}
	if rec, ok := get(t, s, released); ok {
		t.Fatalf("record after a late Release = %+v; want absent", rec)
	}
}

// testCompleteOwnUnknown: MarkUnknown keeps the fingerprint and fence
// until the key is settled; the owner that learns the outcome completes its own
// UNKNOWN record (an abandoned one too), which then leaves the listing.
func testCompleteOwnUnknown(t *testing.T, s store.Store, advance func(time.Duration)) {
	ctx := context.Background()
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	if err := markUnknown(s, ref, "upstream timeout", long); err != nil {
		t.Fatalf("MarkUnknown: %v", err)
	}
	rec := wantUnknown(t, s, ref, "upstream timeout")
	if rec.Fingerprint != "fp" || rec.AcquiredAt.IsZero() || rec.CompletedAt.IsZero() || rec.TTL != 0 {
		t.Fatalf("UNKNOWN record = %+v; want fingerprint and times kept, TTL 0 (kept until settled)", rec)
	}
	wantLost(t, "Extend of own UNKNOWN record", s.Extend(ctx, store.ExtendParams{LeaseRef: ref, LeaseDuration: long, Retention: long}))
	wantLost(t, "Release of own UNKNOWN record", s.Release(ctx, ref))

	want := store.Result{Status: 201, Header: http.Header{"X-Late": {"yes"}}, Body: []byte("known after all")}
	if err := complete(s, ref, want, long); err != nil {
		t.Fatalf("Complete of own UNKNOWN record = %v; want nil", err)
	}
	rec, _ = get(t, s, id)
	checkCompleted(t, rec, want)
	if rec.Fence != ref.Fence || rec.Owner != ref.Owner {
		t.Fatalf("completed record = %+v; want owner %s and fence %d", rec, ref.Owner, ref.Fence)
	}
	if err := complete(s, ref, store.Result{Body: []byte("again")}, long); err != nil {
		t.Fatalf("repeated Complete = %v; want nil", err)
	}
	if got := listUnknown(t, s, store.ListParams{Tenant: id.Tenant}); len(got) != 0 {
		t.Fatalf("ListUnknown after Complete = %+v; want empty", got)
	}

	// The owner of an abandoned record turned UNKNOWN completes it too.
	id = newID(t)
	ref = mustAcquire(t, s, id, short)
	advance(2 * short)
	if res := acquire(t, s, id, "fp", long); res.Record.State != store.StateUnknown {
		t.Fatalf("Acquire of an ended lease = %+v; want UNKNOWN", res)
	}
	if err := complete(s, ref, want, long); err != nil {
		t.Fatalf("Complete of own abandoned record = %v; want nil", err)
	}
	rec, _ = get(t, s, id)
	checkCompleted(t, rec, want)
}

// testReleaseOwnAbandoned: the owner of a record turned UNKNOWN only
// because its lease ended (ReasonAbandoned) releases it like a PROCESSING
// one, when it knows its work did not run: the key leaves the listing and
// the next acquisition runs, under a higher fence. Nobody else releases
// it, and neither does its owner while a reconciliation claim holds it.
func testReleaseOwnAbandoned(t *testing.T, s store.Store, advance func(time.Duration)) {
	ctx := context.Background()
	id, claimed, lapsed, taken := newID(t), newID(t), newID(t), newID(t)
	refs := map[store.ID]store.LeaseRef{}
	for _, k := range []store.ID{id, claimed, lapsed, taken} {
		refs[k] = mustAcquire(t, s, k, short)
	}
	advance(2 * short)
	if res := acquire(t, s, id, "fp", long); res.Acquired || res.Record.State != store.StateUnknown {
		t.Fatalf("Acquire of an ended lease = %+v; want UNKNOWN", res)
	}
	fresh := mustTakeOver(t, s, taken, refs[taken], short)
	if res := claim(t, s, claimed, "reconciler", long); !res.Claimed {
		t.Fatalf("Claim = %+v; want claimed", res)
	}
	if res := claim(t, s, lapsed, "reconciler", short); !res.Claimed {
		t.Fatalf("Claim = %+v; want claimed", res)
	}

	ref := refs[id]
	if got := listUnknown(t, s, store.ListParams{Tenant: id.Tenant}); len(got) != 1 || got[0].ID != id {
		t.Fatalf("ListUnknown = %+v; want the abandoned key", got)
	}
	for _, bad := range []store.LeaseRef{
		{ID: id, Owner: "someone-else", Fence: ref.Fence},
		{ID: id, Owner: ref.Owner, Fence: ref.Fence + 1},
		{ID: id, Owner: ref.Owner, Fence: ref.Fence - 1},
	} {
		wantLost(t, fmt.Sprintf("Release(%+v) of another's abandoned record", bad), s.Release(ctx, bad))
	}
	wantUnknown(t, s, ref, store.ReasonAbandoned)
	if err := s.Release(ctx, ref); err != nil {
		t.Fatalf("Release of own abandoned record = %v; want nil", err)
	}
	if rec, ok := get(t, s, id); ok {
		t.Fatalf("record after the owner released its abandoned record = %+v; want absent", rec)
	}
	if got := listUnknown(t, s, store.ListParams{Tenant: id.Tenant}); len(got) != 0 {
		t.Fatalf("ListUnknown after the owner's Release = %+v; want empty", got)
	}
	wantLost(t, "repeated Release of a released record", s.Release(ctx, ref))
	next := mustAcquire(t, s, id, long)
	if next.Fence <= ref.Fence {
		t.Fatalf("fence after the release = %d; want above %d", next.Fence, ref.Fence)
	}
	wantLost(t, "Release by the released owner of the next owner's record", s.Release(ctx, ref))
	if rec, ok := get(t, s, id); !ok || rec.State != store.StateProcessing || rec.Fence != next.Fence {
		t.Fatalf("record after a stale Release = %+v (found %v); want the next owner's PROCESSING record", rec, ok)
	}

	// A live reconciliation claim stands: the reconciler's verdict decides.
	wantLost(t, "Release of own abandoned record under a claim", s.Release(ctx, refs[claimed]))
	wantUnknown(t, s, refs[claimed], store.ReasonAbandoned)
	if err := s.Resolve(ctx, store.ResolveParams{ID: claimed, Fence: refs[claimed].Fence, Claim: "reconciler"}); err != nil {
		t.Fatalf("Resolve under the claim after a refused Release = %v; want nil", err)
	}

	advance(2 * short)

	// An owner that was taken over cannot release the record of the owner
	// after it, abandoned in turn; that owner can.
	if res := acquire(t, s, taken, "fp", long); res.Acquired || res.Record.State != store.StateUnknown || res.Record.Fence != fresh.Fence {
		t.Fatalf("Acquire of the new owner's ended lease = %+v; want its UNKNOWN record", res)
	}
	wantLost(t, "Release by a stale owner of the new owner's abandoned record", s.Release(ctx, refs[taken]))
	wantUnknown(t, s, fresh, store.ReasonAbandoned)
	if err := s.Release(ctx, fresh); err != nil {
		t.Fatalf("Release by the new owner of its abandoned record = %v; want nil", err)
	}

	// A claim that ended holds nothing.
	if err := s.Release(ctx, refs[lapsed]); err != nil {
		t.Fatalf("Release of own abandoned record after the claim ended = %v; want nil", err)
	}
	if rec, ok := get(t, s, lapsed); ok {
		t.Fatalf("record after the release = %+v; want absent", rec)
	}
}

// testStaleOwnerUnknown: an owner whose key was taken over can neither
// mark the new owner's record UNKNOWN nor complete it once it is UNKNOWN.
func testStaleOwnerUnknown(t *testing.T, s store.Store, advance func(time.Duration)) {
	id := newID(t)
	stale := mustAcquire(t, s, id, short)
	advance(2 * short)
	fresh := mustTakeOver(t, s, id, stale, long)
	wantLost(t, "stale MarkUnknown of the new owner's PROCESSING record", markUnknown(s, stale, "stale", long))
	if rec, ok := get(t, s, id); !ok || rec.State != store.StateProcessing || rec.Fence != fresh.Fence {
		t.Fatalf("record after a stale MarkUnknown = %+v; want the new owner's PROCESSING record", rec)
	}
	if err := markUnknown(s, fresh, "fresh", long); err != nil {
		t.Fatalf("MarkUnknown by the new owner: %v", err)
	}
	wantLost(t, "stale Complete of the new owner's UNKNOWN record", complete(s, stale, store.Result{Body: []byte("stale")}, long))
	wantLost(t, "stale MarkUnknown of the new owner's UNKNOWN record", markUnknown(s, stale, "stale", long))
	for _, bad := range []store.LeaseRef{
		{ID: id, Owner: "someone-else", Fence: fresh.Fence},
		{ID: id, Owner: fresh.Owner, Fence: fresh.Fence + 1},
	} {
		wantLost(t, fmt.Sprintf("Complete(%+v) of an UNKNOWN record", bad), complete(s, bad, store.Result{}, long))
	}
	wantUnknown(t, s, fresh, "fresh")
}

// testMarkUnknownIdempotent: a repeated MarkUnknown (a retry after a lost
// reply) succeeds and keeps the first reason; the key is listed once.
func testMarkUnknownIdempotent(t *testing.T, s store.Store, _ func(time.Duration)) {
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	for _, reason := range []string{"first", "second"} {
		if err := markUnknown(s, ref, reason, long); err != nil {
			t.Fatalf("MarkUnknown(%q) = %v; want nil", reason, err)
		}
	}
	wantUnknown(t, s, ref, "first")
	if got := listUnknown(t, s, store.ListParams{Tenant: id.Tenant}); len(got) != 1 || got[0].ID != id || got[0].Reason != "first" {
		t.Fatalf("ListUnknown = %+v; want the key once, reason first", got)
	}
}

// testClaimExclusive: of concurrent claims on one UNKNOWN record exactly
// one wins; the others get the record. Claim finds nothing to claim on an
// absent, PROCESSING or COMPLETED key.
func testClaimExclusive(t *testing.T, s store.Store, _ func(time.Duration)) {
	const n = 32
	id := newID(t)
	ref := mustUnknown(t, s, id, long)
	results, errs := atOnce(n, func(i int) (store.ClaimResult, error) {
		return s.Claim(context.Background(), store.ClaimParams{ID: id, Owner: fmt.Sprintf("claimer-%d", i), LeaseDuration: long})
	})
	winners := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		if results[i].Claimed {
			winners++
		}
		if r := results[i].Record; r.State != store.StateUnknown || r.Fence != ref.Fence || r.ID != id {
			t.Fatalf("claim %d saw %+v; want the UNKNOWN record, fence %d", i, r, ref.Fence)
		}
	}
	if winners != 1 {
		t.Fatalf("%d of %d concurrent claims won; want exactly 1", winners, n)
	}

	_, err := s.Claim(context.Background(), store.ClaimParams{ID: newID(t), Owner: "c", LeaseDuration: long})
	wantErr(t, "Claim of an absent key", err, store.ErrNotFound)
	processing := newID(t)
	mustAcquire(t, s, processing, long)
	if res := claim(t, s, processing, "c", long); res.Claimed || res.Record.State != store.StateProcessing {
		t.Fatalf("Claim of a PROCESSING key = %+v; want not claimed, the record", res)
	}
	completed := newID(t)
	if err := complete(s, mustAcquire(t, s, completed, long), store.Result{Status: 200}, long); err != nil {
		t.Fatal(err)
	}
	if res := claim(t, s, completed, "c", long); res.Claimed || res.Record.State != store.StateCompleted {
		t.Fatalf("Claim of a COMPLETED key = %+v; want not claimed, the record", res)
	}
}

// testClaimEnds: a claim whose lease ended can be taken by another
// claimer, and no longer resolves.
func testClaimEnds(t *testing.T, s store.Store, advance func(time.Duration)) {
	id := newID(t)
	ref := mustUnknown(t, s, id, long)
	if res := claim(t, s, id, "first", short); !res.Claimed {
		t.Fatalf("first Claim = %+v; want claimed", res)
	}
	advance(2 * short)
	wantLost(t, "Resolve under an ended claim", s.Resolve(context.Background(), store.ResolveParams{ID: id, Fence: ref.Fence, Claim: "first"}))
	if res := claim(t, s, id, "second", long); !res.Claimed || res.Record.State != store.StateUnknown {
		t.Fatalf("Claim after the first claim ended = %+v; want claimed", res)
	}
	if res := claim(t, s, id, "first", long); res.Claimed {
		t.Fatal("Claim while the second claim holds: claimed")
	}
	wantLost(t, "Resolve under the first, ended claim", s.Resolve(context.Background(), store.ResolveParams{ID: id, Fence: ref.Fence, Claim: "first"}))
	if err := s.Resolve(context.Background(), store.ResolveParams{ID: id, Fence: ref.Fence, Claim: "second"}); err != nil {
		t.Fatalf("Resolve under the current claim: %v", err)
	}
}

// testClaimAbandoned: a claim on a PROCESSING record whose lease ended
// turns it UNKNOWN (abandoned) first, kept until settled.
func testClaimAbandoned(t *testing.T, s store.Store, advance func(time.Duration)) {
	id := newID(t)
	ref := mustAcquire(t, s, id, short)
	advance(2 * short)
	res := claim(t, s, id, "claimer", long)
	if r := res.Record; !res.Claimed || r.State != store.StateUnknown || r.Reason != store.ReasonAbandoned || r.Fence != ref.Fence || r.Owner != ref.Owner {
		t.Fatalf("Claim of an ended lease = %+v; want claimed, UNKNOWN %q, fence %d", res, store.ReasonAbandoned, ref.Fence)
	}
	if r := res.Record; r.TTL != 0 {
		t.Fatalf("TTL = %v; want 0: an UNKNOWN record is kept until settled", r.TTL)
	}
	wantUnknown(t, s, ref, store.ReasonAbandoned)
	if got := listUnknown(t, s, store.ListParams{Tenant: id.Tenant}); len(got) != 1 || got[0].ID != id {
		t.Fatalf("ListUnknown = %+v; want the claimed key", got)
	}
	wantLost(t, "Extend after a claim turned the record UNKNOWN", s.Extend(context.Background(), store.ExtendParams{LeaseRef: ref, LeaseDuration: long, Retention: long}))
}

// testResolveCompleted: a resolution with a result turns the UNKNOWN
// record COMPLETED for the new retention; retries replay it. An operator
// (no claim) resolves whoever holds the claim.
func testResolveCompleted(t *testing.T, s store.Store, _ func(time.Duration)) {
	ctx := context.Background()
	want := store.Result{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"ch_1"}`)}
	for _, by := range []string{"claimer", "operator"} {
		t.Run(by, func(t *testing.T) {
			id := newID(t)
			ref := mustUnknown(t, s, id, long)
			if res := claim(t, s, id, "claimer", long); !res.Claimed {
				t.Fatalf("Claim = %+v; want claimed", res)
			}
			p := store.ResolveParams{ID: id, Fence: ref.Fence, Result: &want, Retention: hold}
			if by == "claimer" {
				p.Claim = "claimer"
			}
			if err := s.Resolve(ctx, p); err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			rec, _ := get(t, s, id)
			checkCompleted(t, rec, want)
			if rec.Owner != ref.Owner || rec.Fence != ref.Fence || rec.Fingerprint != "fp" || rec.TTL <= 0 || rec.TTL > hold {
				t.Fatalf("resolved record = %+v; want owner %s, fence %d, fingerprint kept, TTL in (0, %v]", rec, ref.Owner, ref.Fence, hold)
			}
			if res := acquire(t, s, id, "fp", long); res.Acquired {
				t.Fatalf("Acquire of a resolved key = %+v; want the replay", res)
			} else {
				checkCompleted(t, res.Record, want)
			}
			wantErr(t, "second Resolve", s.Resolve(ctx, p), store.ErrNotUnknown)
			if got := listUnknown(t, s, store.ListParams{Tenant: id.Tenant}); len(got) != 0 {
				t.Fatalf("ListUnknown after Resolve = %+v; want empty", got)
			}
		})
	}
}

// testResolveNotExecuted: a resolution without a result deletes the
// record, so the retry runs, under a fence above the UNKNOWN one.
func testResolveNotExecuted(t *testing.T, s store.Store, _ func(time.Duration)) {
	id := newID(t)
	ref := mustUnknown(t, s, id, long)
	if err := s.Resolve(context.Background(), store.ResolveParams{ID: id, Fence: ref.Fence}); err != nil {
		t.Fatalf("Resolve not executed: %v", err)
	}
	if rec, ok := get(t, s, id); ok {
		t.Fatalf("record after Resolve not executed = %+v; want absent", rec)
	}
	if got := listUnknown(t, s, store.ListParams{Tenant: id.Tenant}); len(got) != 0 {
		t.Fatalf("ListUnknown after Resolve = %+v; want empty", got)
	}
	next := mustAcquire(t, s, id, long)
	if next.Fence <= ref.Fence {
		t.Fatalf("fence after Resolve not executed = %d; want above %d", next.Fence, ref.Fence)
	}
}

// testResolveErrors: a Resolve that cannot apply says why and changes
// nothing.
func testResolveErrors(t *testing.T, s store.Store, _ func(time.Duration)) {
	ctx := context.Background()
	result := &store.Result{Status: 200}
	wantErr(t, "Resolve of an absent key", s.Resolve(ctx, store.ResolveParams{ID: newID(t), Fence: 1, Result: result, Retention: long}), store.ErrNotFound)

	processing := newID(t)
	pref := mustAcquire(t, s, processing, long)
	wantErr(t, "Resolve of a PROCESSING key", s.Resolve(ctx, store.ResolveParams{ID: processing, Fence: pref.Fence}), store.ErrNotUnknown)
	if rec, ok := get(t, s, processing); !ok || rec.State != store.StateProcessing {
		t.Fatalf("PROCESSING record after a refused Resolve = %+v (found %v)", rec, ok)
	}
	completed := newID(t)
	cref := mustAcquire(t, s, completed, long)
	if err := complete(s, cref, store.Result{Status: 201}, long); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Resolve of a COMPLETED key", s.Resolve(ctx, store.ResolveParams{ID: completed, Fence: cref.Fence, Result: result, Retention: long}), store.ErrNotUnknown)
	if rec, _ := get(t, s, completed); rec.State != store.StateCompleted || rec.Result.Status != 201 {
		t.Fatalf("COMPLETED record after a refused Resolve = %+v", rec)
	}

	id := newID(t)
	ref := mustUnknown(t, s, id, long)
	for _, fence := range []int64{ref.Fence - 1, ref.Fence + 1, 0} {
		wantErr(t, fmt.Sprintf("Resolve with fence %d of a record with fence %d", fence, ref.Fence),
			s.Resolve(ctx, store.ResolveParams{ID: id, Fence: fence, Result: result, Retention: long}), store.ErrStaleFence)
		wantErr(t, fmt.Sprintf("Resolve not executed with fence %d", fence), s.Resolve(ctx, store.ResolveParams{ID: id, Fence: fence}), store.ErrStaleFence)
	}
	wantLost(t, "Resolve under a claim nobody took", s.Resolve(ctx, store.ResolveParams{ID: id, Fence: ref.Fence, Claim: "nobody"}))
	if res := claim(t, s, id, "holder", long); !res.Claimed {
		t.Fatalf("Claim = %+v; want claimed", res)
	}
	wantLost(t, "Resolve under another's claim", s.Resolve(ctx, store.ResolveParams{ID: id, Fence: ref.Fence, Claim: "intruder", Result: result, Retention: long}))
	wantLost(t, "Resolve not executed under another's claim", s.Resolve(ctx, store.ResolveParams{ID: id, Fence: ref.Fence, Claim: "intruder"}))
	wantUnknown(t, s, ref, "test")
}

// listUnknown returns every UNKNOWN record that p's pages list, checking
// that no record is listed twice.
func listUnknown(t *testing.T, s store.Store, p store.ListParams) []store.Record {
	t.Helper()
	var all []store.Record
	seen := map[store.ID]bool{}
	for pages := 0; ; pages++ {
		page, err := s.ListUnknown(context.Background(), p)
		if err != nil {
			t.Fatalf("ListUnknown(%+v): %v", p, err)
		}
		for _, r := range page.Records {
			if seen[r.ID] {
				t.Fatalf("ListUnknown listed %v twice", r.ID)
			}
			seen[r.ID] = true
			if r.State != store.StateUnknown || (!p.AllTenants && r.Tenant != p.Tenant) {
				t.Fatalf("ListUnknown(%+v) listed %+v; want UNKNOWN records of tenant %q only", p, r, p.Tenant)
			}
		}
		all = append(all, page.Records...)
		if page.Next == "" {
			return all
		}
		if page.Next == p.After || pages > 10000 {
			t.Fatalf("ListUnknown(%+v) does not advance: Next %q", p, page.Next)
		}
		p.After = page.Next
	}
}

func ids(recs []store.Record) []store.ID {
	out := make([]store.ID, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// testListUnknown: a tenant's listing holds its UNKNOWN keys and nothing
// else, not even a tenant whose name extends it; the listing of all
// tenants holds every one of them.
func testListUnknown(t *testing.T, s store.Store, _ func(time.Duration)) {
	tenant := "list-" + rand.Text()[:8]
	other := tenant + "a" // sorts right after tenant's keys
	want := map[string][]store.ID{}
	for _, tn := range []string{tenant, other} {
		for i := range 3 {
			id := store.ID{Tenant: tn, Key: fmt.Sprintf("k%d", i)}
			ref := mustUnknown(t, s, id, long)
			want[tn] = append(want[tn], id)
			if rec := wantUnknown(t, s, ref, "test"); rec.Fingerprint != "fp" {
				t.Fatalf("UNKNOWN record = %+v; want fingerprint fp", rec)
			}
		}
	}
	// Keys of the tenant that are not UNKNOWN.
	mustAcquire(t, s, store.ID{Tenant: tenant, Key: "processing"}, long)
	if err := complete(s, mustAcquire(t, s, store.ID{Tenant: tenant, Key: "completed"}, long), store.Result{}, long); err != nil {
		t.Fatal(err)
	}
	for _, tn := range []string{tenant, other} {
		got := ids(listUnknown(t, s, store.ListParams{Tenant: tn}))
		slices.SortFunc(got, func(a, b store.ID) int { return cmp.Compare(a.Key, b.Key) })
		if !slices.Equal(got, want[tn]) {
			t.Fatalf("ListUnknown(%q) = %v; want %v", tn, got, want[tn])
		}
	}
	all := map[store.ID]bool{}
	for _, r := range listUnknown(t, s, store.ListParams{AllTenants: true, Limit: store.MaxListLimit}) {
		all[r.ID] = true
	}
	for _, id := range append(want[tenant], want[other]...) {
		if !all[id] {
			t.Fatalf("ListUnknown of all tenants misses %v", id)
		}
	}
	if got := listUnknown(t, s, store.ListParams{Tenant: "nobody-" + rand.Text()[:8]}); len(got) != 0 {
		t.Fatalf("ListUnknown of a tenant without keys = %+v; want empty", got)
	}
}

// testListPages: pages are full up to the limit (zero: DefaultListLimit;
// above MaxListLimit: MaxListLimit), in a stable order: paging by any
// limit lists the same records in the same order.
func testListPages(t *testing.T, s store.Store, _ func(time.Duration)) {
	const n = store.MaxListLimit + 1
	tenant := "pages-" + rand.Text()[:8]
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				id := store.ID{Tenant: tenant, Key: fmt.Sprintf("key-%04d", i)}
				res, err := s.Acquire(context.Background(), store.AcquireParams{ID: id, Owner: rand.Text(), LeaseDuration: long, Retention: long})
				if err == nil {
					err = markUnknown(s, store.LeaseRef{ID: id, Owner: res.Record.Owner, Fence: res.Record.Fence}, "test", long)
				}
				if err != nil {
					mu.Lock()
					failed = errors.Join(failed, fmt.Errorf("%v: %w", id, err))
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if failed != nil {
		t.Fatal(failed)
	}

	ctx := context.Background()
	// This tenant's index has no stale entries, so every page but the last is full.
	for _, c := range []struct{ limit, want int }{{0, store.DefaultListLimit}, {store.MaxListLimit + 500, store.MaxListLimit}, {7, 7}} {
		page, err := s.ListUnknown(ctx, store.ListParams{Tenant: tenant, Limit: c.limit})
		if err != nil {
			t.Fatalf("ListUnknown(limit %d): %v", c.limit, err)
		}
		if len(page.Records) != c.want || page.Next == "" {
			t.Fatalf("ListUnknown(limit %d) = %d records, next %q; want %d and a next page", c.limit, len(page.Records), page.Next, c.want)
		}
	}
	byMax := ids(listUnknown(t, s, store.ListParams{Tenant: tenant, Limit: store.MaxListLimit}))
	if len(byMax) != n {
		t.Fatalf("ListUnknown listed %d records; want %d", len(byMax), n)
	}
	by7 := ids(listUnknown(t, s, store.ListParams{Tenant: tenant, Limit: 7}))
	if !slices.Equal(byMax, by7) {
		t.Fatal("paging by 7 and by MaxListLimit list different records or orders")
	}
}

// testListForgets: keys that stop being UNKNOWN (resolved either way,
// completed by their owner, deleted) leave the listing; a page whose keys
// all went still leads on to the rest. A key past its MarkUnknown's
// retention stays listed: time settles nothing.
func testListForgets(t *testing.T, s store.Store, advance func(time.Duration)) {
	ctx := context.Background()
	tenant := "forget-" + rand.Text()[:8]
	refs := map[string]store.LeaseRef{}
	for _, k := range []string{"a-resolved", "b-not-executed", "c-completed", "d-deleted", "e-past-retention", "f-kept"} {
		retention := long
		if k == "e-past-retention" {
			retention = short
		}
		refs[k] = mustUnknown(t, s, store.ID{Tenant: tenant, Key: k}, retention)
	}
	if err := s.Resolve(ctx, store.ResolveParams{ID: refs["a-resolved"].ID, Fence: refs["a-resolved"].Fence, Result: &store.Result{Status: 200}, Retention: long}); err != nil {
		t.Fatal(err)
	}
	if err := s.Resolve(ctx, store.ResolveParams{ID: refs["b-not-executed"].ID, Fence: refs["b-not-executed"].Fence}); err != nil {
		t.Fatal(err)
	}
	if err := complete(s, refs["c-completed"], store.Result{Status: 200}, long); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Delete(ctx, store.DeleteParams{ID: refs["d-deleted"].ID}); err != nil || !ok {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	advance(2 * short)
	kept := []store.ID{refs["e-past-retention"].ID, refs["f-kept"].ID}
	for _, limit := range []int{1, 0} {
		// In the store's order: by key, on Redis Cluster by slot first.
		got := ids(listUnknown(t, s, store.ListParams{Tenant: tenant, Limit: limit}))
		slices.SortFunc(got, func(a, b store.ID) int { return cmp.Compare(a.Key, b.Key) })
		if !slices.Equal(got, kept) {
			t.Fatalf("ListUnknown(limit %d) = %v; want only %v", limit, got, kept)
		}
	}
}

// testAbandonedLeaseIsListed: a PROCESSING record whose lease ended with
// nobody to finish it (its owner crashed) is listed as soon as the lease
// ends, UNKNOWN (abandoned) since then, as Get reports it, before any
// retry or claim has touched it: a key no client comes back for is seen by
// the operator, the metrics and the reconcile sweep all the same (issue
// 31, item 6). Listing changes nothing: a takeover still takes it, and a
// record that leaves PROCESSING or UNKNOWN leaves the listing; a lease
// that still holds is not listed.
func testAbandonedLeaseIsListed(t *testing.T, s store.Store, advance func(time.Duration)) {
	ctx := context.Background()
	tenant := "abandoned-" + rand.Text()[:8]
	id := func(k string) store.ID { return store.ID{Tenant: tenant, Key: k} }
	crashed := map[string]store.AcquireResult{}
	for _, k := range []string{"a-crashed", "c-completed-late", "d-released-late", "e-taken-over", "f-crashed"} {
		crashed[k] = acquire(t, s, id(k), "fp", short)
	}
	live := mustAcquire(t, s, id("b-live"), long)
	mustUnknown(t, s, id("g-marked"), long)
	done := mustAcquire(t, s, id("h-completed"), long)
	if err := complete(s, done, store.Result{Status: 200}, long); err != nil {
		t.Fatal(err)
	}
	advance(2 * short)

	// In the store's order: by tenant and key, on Redis Cluster by slot first.
	byKey := func(recs []store.Record) []store.ID {
		got := ids(recs)
		slices.SortFunc(got, func(a, b store.ID) int { return cmp.Compare(a.Key, b.Key) })
		return got
	}
	want := []store.ID{id("a-crashed"), id("c-completed-late"), id("d-released-late"), id("e-taken-over"), id("f-crashed"), id("g-marked")}
	for _, limit := range []int{0, 1, 2} {
		listed := listUnknown(t, s, store.ListParams{Tenant: tenant, Limit: limit})
		if got := byKey(listed); !slices.Equal(got, want) {
			t.Fatalf("ListUnknown(limit %d) after the leases ended = %v; want %v: every ended lease, not the live one %v", limit, got, want, live.ID)
		}
		for _, r := range listed {
			first, ok := crashed[r.Key]
			if !ok {
				continue
			}
			since := r.CompletedAt.Sub(first.Record.AcquiredAt) - short
			if r.State != store.StateUnknown || r.Reason != store.ReasonAbandoned || r.Fence != first.Record.Fence || r.Owner != first.Record.Owner ||
				r.Fingerprint != "fp" || r.TTL != 0 || since < -2*time.Millisecond || since > 2*time.Millisecond {
				t.Fatalf("listed %+v; want UNKNOWN %q with fence %d, owner %s, unknown since its lease ended (%v after %v)",
					r, store.ReasonAbandoned, first.Record.Fence, first.Record.Owner, short, first.Record.AcquiredAt)
			}
		}
	}
	all := map[store.ID]bool{}
	for _, r := range listUnknown(t, s, store.ListParams{AllTenants: true, Limit: store.MaxListLimit}) {
		all[r.ID] = true
	}
	if !all[id("a-crashed")] || !all[id("f-crashed")] || all[id("b-live")] {
		t.Fatalf("ListUnknown of all tenants: a-crashed %v, f-crashed %v, b-live %v; want the ended leases and not the live one",
			all[id("a-crashed")], all[id("f-crashed")], all[id("b-live")])
	}

	// Listing changed nothing: the owner's late word is taken, and a
	// takeover takes the key.
	ref := func(k string) store.LeaseRef {
		return store.LeaseRef{ID: id(k), Owner: crashed[k].Record.Owner, Fence: crashed[k].Record.Fence}
	}
	if err := complete(s, ref("c-completed-late"), store.Result{Status: 201}, long); err != nil {
		t.Fatalf("late Complete of a listed abandoned record = %v; want nil", err)
	}
	if err := s.Release(ctx, ref("d-released-late")); err != nil {
		t.Fatalf("late Release of a listed abandoned record = %v; want nil", err)
	}
	mustTakeOver(t, s, id("e-taken-over"), ref("e-taken-over"), long)
	want = []store.ID{id("a-crashed"), id("f-crashed"), id("g-marked")}
	if got := byKey(listUnknown(t, s, store.ListParams{Tenant: tenant, Limit: 1})); !slices.Equal(got, want) {
		t.Fatalf("ListUnknown after a late Complete, a late Release and a takeover = %v; want %v", got, want)
	}
}
