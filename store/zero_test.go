package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/layered"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
)

// A Store its package's New did not make, zero or nil, answers every
// method with an error saying so; none panics (the memory store's did
// with its lock held, and every later call waited forever).
func TestZeroStoresErr(t *testing.T) {
	ctx := context.Background()
	id := store.ID{Tenant: "acme", Key: "zero"}
	type closer interface {
		store.Store
		Close() error
	}
	stores := map[string]func() closer{
		"memstore":       func() closer { return &memstore.Store{} },
		"memstore nil":   func() closer { return (*memstore.Store)(nil) },
		"redisstore":     func() closer { return &redisstore.Store{} },
		"redisstore nil": func() closer { return (*redisstore.Store)(nil) },
		"layered":        func() closer { return &layered.Store{} },
		"layered nil":    func() closer { return (*layered.Store)(nil) },
	}
	for name, make := range stores {
		t.Run(name, func(t *testing.T) {
			s := make()
			check := func(op string, f func() error) {
				t.Helper()
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s panicked: %v", op, r)
					}
				}()
				if err := f(); err == nil || !strings.Contains(err.Error(), "Store not made with New") {
					t.Errorf("%s = %v; want an error saying the Store was not made with New", op, err)
				}
			}
			for range 2 { // again: a panic must not leave a lock held
				check("Acquire", func() error { _, err := s.Acquire(ctx, store.AcquireParams{ID: id}); return err })
				check("Complete", func() error { return s.Complete(ctx, store.CompleteParams{}) })
				check("Extend", func() error { return s.Extend(ctx, store.ExtendParams{}) })
				check("Release", func() error { return s.Release(ctx, store.LeaseRef{ID: id}) })
				check("MarkUnknown", func() error { return s.MarkUnknown(ctx, store.MarkUnknownParams{}) })
				check("Claim", func() error { _, err := s.Claim(ctx, store.ClaimParams{ID: id}); return err })
				check("Resolve", func() error { return s.Resolve(ctx, store.ResolveParams{}) })
				check("ListUnknown", func() error { _, err := s.ListUnknown(ctx, store.ListParams{Tenant: "acme"}); return err })
				check("Get", func() error { _, err := s.Get(ctx, id); return err })
				check("Delete", func() error { _, err := s.Delete(ctx, store.DeleteParams{ID: id}); return err })
				check("Close", s.Close)
			}
			switch s := s.(type) {
			case *memstore.Store:
				check("Usage", func() error {
					if used, limit := s.Usage(); used != 0 || limit != 0 {
						t.Errorf("Usage = %d, %d; want 0, 0", used, limit)
					}
					return s.Close()
				})
			case *redisstore.Store:
				check("CheckEviction", func() error { return s.CheckEviction(ctx) })
				check("stats", func() error {
					_, near := s.NearCacheStats()
					_, co := s.CoalesceStats()
					if near || co {
						t.Errorf("NearCacheStats, CoalesceStats report on; want off")
					}
					return s.Close()
				})
			}
		})
	}
}
