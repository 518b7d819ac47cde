package storetest

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// The cases of what an operator asks of a store: listings with a cursor
// the store did not make for them.

// testListBadCursor: a cursor the store did not make, or made for
// another tenant's listing, is refused with ErrInvalidCursor, a client's
// error, not a store failure.
func testListBadCursor(t *testing.T, s idem.Store, _ func(time.Duration)) {
	ctx := context.Background()
	tenant, other := "cursor-"+rand.Text()[:8], "cursor-"+rand.Text()[:8]
	for _, id := range []idem.ID{{Tenant: tenant, Key: "a"}, {Tenant: tenant, Key: "b"}, {Tenant: other, Key: "a"}, {Tenant: other, Key: "b"}} {
		mustUnknown(t, s, id, long)
	}
	page, err := s.ListUnknown(ctx, idem.ListParams{Tenant: tenant, Limit: 1})
	if err != nil || page.Next == "" {
		t.Fatalf("ListUnknown(%q, limit 1) = %+v, %v; want a page and a next", tenant, page, err)
	}
	for _, p := range []idem.ListParams{
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
		if !errors.Is(err, idem.ErrInvalidCursor) {
			t.Errorf("ListUnknown(%+v) = %v; want ErrInvalidCursor", p, err)
		}
	}
	if got := listUnknown(t, s, idem.ListParams{Tenant: tenant, After: page.Next}); len(got) != 1 || got[0].Key != "b" {
		t.Fatalf("ListUnknown after the first page = %v; want key b", ids(got))
	}
}
