package listcursor

import (
	"testing"

	"github.com/idemkit/idem/store"
)

func TestAfterReadsBackWhatNextWrote(t *testing.T) {
	for _, id := range []store.ID{{Tenant: "", Key: "k"}, {Tenant: "a:b", Key: "c"}, {Tenant: "a", Key: "b:c"}, {Tenant: "12", Key: "3:x"}} {
		got, ok := After(store.ListParams{Tenant: id.Tenant, After: Next(id)})
		if !ok || got != id {
			t.Errorf("After(Next(%+v)) = %+v, %v", id, got, ok)
		}
	}
	if Next(store.ID{Tenant: "a:b", Key: "c"}) == Next(store.ID{Tenant: "a", Key: "b:c"}) {
		t.Error("two IDs share a cursor")
	}
	if id, ok := After(store.ListParams{Tenant: "t"}); !ok || id != (store.ID{}) {
		t.Errorf("a first page starts after %+v, %v; want the zero ID", id, ok)
	}
	other := Next(store.ID{Tenant: "other", Key: "k"})
	if _, ok := After(store.ListParams{Tenant: "t", After: other}); ok {
		t.Error("one tenant's listing took another tenant's cursor")
	}
	if _, ok := After(store.ListParams{AllTenants: true, After: other}); !ok {
		t.Error("a listing of all tenants refused a cursor of one")
	}
	for _, bad := range []string{"x", "5:ab", "-1:a", "1:a", ":k", "1:a\x00"} {
		if _, ok := After(store.ListParams{AllTenants: true, After: bad}); ok {
			t.Errorf("After(%q) = ok; want a malformed cursor refused", bad)
		}
	}
}
