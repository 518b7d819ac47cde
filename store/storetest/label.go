package storetest

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
)

// maxLabel is a label of store.MaxLabelLength bytes that a byte-exact
// store keeps as given: spaces, quotes, a percent-encoded path, and
// characters of two, three and four bytes.
var maxLabel = func() string {
	l := `POST /v1/orders/%C3%A9t%C3%A9 route="orders" é€😀 `
	for len(l) < store.MaxLabelLength {
		l += "x"
	}
	return l
}()

// testLabelKept: the label given at Acquire is the record's through
// every change it goes through (Extend, Complete, MarkUnknown, Claim,
// Resolve, an ended lease reported or turned UNKNOWN, a listing), a
// takeover's record carries the new acquisition's label, and a tombstone
// carries none (issue 36, item 4: an operator sees what an UNKNOWN key's
// request was).
func testLabelKept(t *testing.T, s store.Store, advance func(time.Duration)) {
	ctx := context.Background()
	completed, unknown, abandoned, taken, tomb := newID(t), newID(t), newID(t), newID(t), newID(t)
	acquireLabelled := func(id store.ID, label string, lease, retention, keyRetention time.Duration, takeOver bool) store.AcquireResult {
		t.Helper()
		res := acquireWith(t, s, store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: lease,
			Retention: retention, KeyRetention: keyRetention, Label: label, TakeOver: takeOver})
		if !res.Acquired || res.Record.Label != label {
			t.Fatalf("Acquire(%v) with label %q = %+v; want acquired, with the label", id, label, res)
		}
		return res
	}
	ref := func(res store.AcquireResult) store.LeaseRef {
		return store.LeaseRef{ID: res.Record.ID, Owner: res.Record.Owner, Fence: res.Record.Fence}
	}
	want := func(what string, rec store.Record, state store.State, label string) {
		t.Helper()
		if rec.State != state || rec.Label != label {
			t.Fatalf("%s = %+v; want %v with label %q", what, rec, state, label)
		}
	}

	// PROCESSING, extended, COMPLETED, and the record a later Acquire meets.
	r := ref(acquireLabelled(completed, maxLabel, long, long, 0, false))
	want("Get of the acquired key", mustGet(t, s, completed), store.StateProcessing, maxLabel)
	if err := s.Extend(ctx, store.ExtendParams{LeaseRef: r, LeaseDuration: long, Retention: long}); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	want("Get after Extend", mustGet(t, s, completed), store.StateProcessing, maxLabel)
	if err := complete(s, r, store.Result{Status: 201, Body: []byte("done")}, long); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	want("Get after Complete", mustGet(t, s, completed), store.StateCompleted, maxLabel)
	want("Acquire of the completed key", acquire(t, s, completed, "fp", long).Record, store.StateCompleted, maxLabel)

	// UNKNOWN, listed, claimed, resolved as completed.
	const label = "POST /v1/charges route=charges"
	r = ref(acquireLabelled(unknown, label, long, long, 0, false))
	if err := markUnknown(s, r, "timeout", long); err != nil {
		t.Fatalf("MarkUnknown: %v", err)
	}
	want("Get after MarkUnknown", mustGet(t, s, unknown), store.StateUnknown, label)
	listed := listUnknown(t, s, store.ListParams{Tenant: unknown.Tenant})
	if len(listed) != 1 {
		t.Fatalf("ListUnknown of the tenant = %+v; want the one UNKNOWN key", listed)
	}
	want("ListUnknown", listed[0], store.StateUnknown, label)
	want("Claim", claim(t, s, unknown, rand.Text(), long).Record, store.StateUnknown, label)
	if err := s.Resolve(ctx, store.ResolveParams{ID: unknown, Fence: r.Fence, Result: &store.Result{Status: 200}, Retention: long}); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	want("Get after Resolve as completed", mustGet(t, s, unknown), store.StateCompleted, label)

	// An ended lease: reported UNKNOWN, listed, turned UNKNOWN by an
	// Acquire; taken over, the record is the new acquisition's.
	acquireLabelled(abandoned, label, short, long, 0, false)
	acquireLabelled(taken, label, short, long, 0, false)
	advance(2 * short)
	want("Get of an ended lease", mustGet(t, s, abandoned), store.StateUnknown, label)
	for _, rec := range listUnknown(t, s, store.ListParams{Tenant: abandoned.Tenant}) {
		want("ListUnknown of an ended lease", rec, store.StateUnknown, label)
	}
	want("Acquire of an ended lease", acquire(t, s, abandoned, "fp", long).Record, store.StateUnknown, label)
	want("Get after that Acquire", mustGet(t, s, abandoned), store.StateUnknown, label)
	const next = "PATCH /v1/charges/ch_1 route=charges"
	acquireLabelled(taken, next, long, long, 0, true)
	want("Get of the key taken over", mustGet(t, s, taken), store.StateProcessing, next)

	// A tombstone keeps only what refuses the key.
	r = ref(acquireLabelled(tomb, label, long, long, 0, false))
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: r, Result: store.Result{Status: 201}, Retention: short, KeyRetention: long}); err != nil {
		t.Fatalf("Complete with a key retention: %v", err)
	}
	advance(2 * short)
	want("Get of a tombstone", mustGet(t, s, tomb), store.StateExpired, "")

	// No label, no label.
	bare := newID(t)
	if rec := acquire(t, s, bare, "fp", long).Record; rec.Label != "" || mustGet(t, s, bare).Label != "" {
		t.Fatalf("Acquire without a label = %+v; want none", rec)
	}
}
