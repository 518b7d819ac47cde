// Package listcursor is the ListPage.Next of the stores that list in
// (tenant, key) order, memstore and pgstore: the last listed record's ID,
// its tenant's length first, so that whatever bytes a tenant and key hold,
// no pair of them reads back as another.
package listcursor

import (
	"strconv"
	"strings"

	"github.com/idemkit/idem/store"
)

// Next returns the cursor of a page whose last record is id.
func Next(id store.ID) string {
	return strconv.Itoa(len(id.Tenant)) + ":" + id.Tenant + id.Key
}

// After returns the ID that p.After names, after which p's page starts:
// the zero ID for a first page (no After). It reports false when p.After is
// not a cursor of this listing: malformed, not a valid tenant and key, or
// another tenant's when p is one tenant's.
func After(p store.ListParams) (store.ID, bool) {
	if p.After == "" {
		return store.ID{}, true
	}
	n, rest, ok := strings.Cut(p.After, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size > len(rest) {
		return store.ID{}, false
	}
	id := store.ID{Tenant: rest[:size], Key: rest[size:]}
	if store.ValidateTenant(id.Tenant) != nil || store.ValidateKey(id.Key) != nil || (!p.AllTenants && id.Tenant != p.Tenant) {
		return store.ID{}, false
	}
	return id, true
}
