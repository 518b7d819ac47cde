package memstore

import (
	"fmt"
	"net/http"

	"github.com/idemkit/idem/store"
)

// This file keeps the room the records take: their sizes, the bound
// (Options.MaxBytes) and each tenant's share of it (Options.TenantShare),
// and the heap that orders the records by the end of their life.

// DefaultTenantShare is the fraction of Options.MaxBytes one tenant's
// records may take when Options.TenantShare is zero: four tenants at
// their share fill the store, one alone never does.
const DefaultTenantShare = 0.25

// recordOverhead approximates the bytes a record costs beyond its strings.
const recordOverhead = 256

// admit returns store.ErrStoreFull, wrapped with which bound is reached,
// when tenant may not take need more bytes (a new record, or the
// difference a takeover makes): its records would pass its share, or the
// store's bound would be passed. The bound counts each tenant up to its
// share, so a tenant whose results were completed past its share (see
// Store.Complete) is refused, and the others are not.
func (s *Store) admit(tenant string, need int64) error {
	held := s.byTenant[tenant]
	if held+need > s.tenantBytes {
		return fmt.Errorf("%w: the tenant's records fill its share of the memory store (%d of %d bytes)", store.ErrStoreFull, held, s.tenantBytes)
	}
	if s.counted+need > s.maxBytes {
		return fmt.Errorf("%w: the records fill the memory store (%d of %d bytes)", store.ErrStoreFull, s.counted, s.maxBytes)
	}
	return nil
}

// charge adds n bytes, n < 0 to take them away, to tenant's records.
func (s *Store) charge(tenant string, n int64) {
	held := s.byTenant[tenant]
	s.counted += min(held+n, s.tenantBytes) - min(held, s.tenantBytes)
	if held+n == 0 {
		delete(s.byTenant, tenant)
		return
	}
	s.byTenant[tenant] = held + n
}

func (s *Store) add(e *entry, size int64) {
	e.size = size
	s.charge(e.rec.Tenant, size)
	s.entries[e.rec.ID] = e
}

func (s *Store) grow(e *entry, n int64) {
	e.size += n
	s.charge(e.rec.Tenant, n)
}

func (s *Store) remove(e *entry) {
	if e.frozen {
		key := frozenKey(e.rec.ID)
		s.dropFrozen(key, s.frozen[key])
		return
	}
	delete(s.entries, e.rec.ID)
	s.charge(e.rec.Tenant, -e.size)
}

func headerSize(h http.Header) int64 {
	var n int64
	for k, vs := range h {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v)) + 16
		}
	}
	return n
}

// tombstoneOverhead is what a tombstone costs beyond its strings: 600
// bytes measured per tombstone with 164 bytes of strings
// (TestTombstoneCost; docs/cost-curve.md, "Tombstones").
const tombstoneOverhead = 440
