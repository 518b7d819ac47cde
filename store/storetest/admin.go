package storetest

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
)

// The cases of what an operator asks of a store: a deletion of one
// attempt's record, listings with a cursor the store did not make for them.

// testListBadCursor: a cursor the store did not make, or made for
// another tenant's listing, is refused with ErrInvalidCursor, a client's
// error, not a store failure.
func testListBadCursor(t *testing.T, s store.Store, _ func(time.Duration)) {
	ctx := context.Background()
	tenant, other := "cursor-"+rand.Text()[:8], "cursor-"+rand.Text()[:8]
	for _, id := range []store.ID{{Tenant: tenant, Key: "a"}, {Tenant: tenant, Key: "b"}, {Tenant: other, Key: "a"}, {Tenant: other, Key: "b"}} {
		mustUnknown(t, s, id, long)
	}
	page, err := s.ListUnknown(ctx, store.ListParams{Tenant: tenant, Limit: 1})
	if err != nil || page.Next == "" {
		t.Fatalf("ListUnknown(%q, limit 1) = %+v, %v; want a page and a next", tenant, page, err)
	}
	for _, p := range []store.ListParams{
		{Tenant: tenant, After: "x"},
		{AllTenants: true, After: "x"},
		{Tenant: tenant, After: "-1:"},
		{Tenant: tenant, After: "99999999:zz"},
		{Tenant: tenant, After: "\xff\xfe"},
		{AllTenants: true, After: "0:\xff"}, // no valid key in any store's form
		{AllTenants: true, After: "0:"},
		{Tenant: other, After: page.Next}, // another tenant's cursor
	} {
		_, err := s.ListUnknown(ctx, p)
		if !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("ListUnknown(%+v) = %v; want ErrInvalidCursor", p, err)
		}
	}
	rest := listUnknown(t, s, store.ListParams{Tenant: tenant, After: page.Next})
	if len(page.Records) != 1 || len(rest) != 1 || rest[0].Tenant != tenant || rest[0].Key == page.Records[0].Key {
		t.Fatalf("ListUnknown: first page %v, then %v; want %q's two keys, one each", ids(page.Records), ids(rest), tenant)
	}
}

// testDeleteByFence: a Delete with a fence removes only the record of
// that acquisition, whatever its state, and leaves another's untouched.
func testDeleteByFence(t *testing.T, s store.Store, _ func(time.Duration)) {
	ctx := context.Background()
	id := newID(t)
	ref := mustAcquire(t, s, id, long)
	for _, fence := range []int64{ref.Fence - 1, ref.Fence + 1} {
		if ok, err := s.Delete(ctx, store.DeleteParams{ID: id, Fence: fence}); err != nil || ok {
			t.Fatalf("Delete(fence %d) of the record with fence %d = %v, %v; want false, nil", fence, ref.Fence, ok, err)
		}
	}
	if err := complete(s, ref, store.Result{Status: 200}, long); err != nil {
		t.Fatalf("Complete after Deletes with other fences: %v; want the record untouched", err)
	}
	if ok, err := s.Delete(ctx, store.DeleteParams{ID: id, Fence: ref.Fence}); err != nil || !ok {
		t.Fatalf("Delete(its fence) = %v, %v; want true, nil", ok, err)
	}
	if _, ok := get(t, s, id); ok {
		t.Fatal("the record survived a Delete with its fence")
	}
	next := mustAcquire(t, s, id, long) // a new attempt: the old fence names it no more
	if ok, err := s.Delete(ctx, store.DeleteParams{ID: id, Fence: ref.Fence}); err != nil || ok {
		t.Fatalf("Delete(the old fence) of the new attempt's record = %v, %v; want false, nil", ok, err)
	}
	if rec, ok := get(t, s, id); !ok || rec.Fence != next.Fence || rec.State != store.StateProcessing {
		t.Fatalf("record after a Delete with the old fence = %+v; want the new attempt's, PROCESSING", rec)
	}
	if ok, err := s.Delete(ctx, store.DeleteParams{ID: newID(t), Fence: 1}); err != nil || ok {
		t.Fatalf("Delete(absent, fence 1) = %v, %v; want false, nil", ok, err)
	}
}
