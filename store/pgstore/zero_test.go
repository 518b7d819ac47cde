package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgstore"
)

// TestZeroStoreErrs calls every method of a Store that New did not make,
// a zero Store and a nil *Store, and the guardrail with nil arguments:
// each returns ErrConfig, none panics, and under Do the key is released
// (the work never ran).
func TestZeroStoreErrs(t *testing.T) {
	s := newStore(t)
	pool := s.Pool()
	ctx := context.Background()
	e, err := idem.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	id := store.ID{Tenant: "acme", Key: "zero"}
	ran := false
	work := func(pgx.Tx) ([]byte, error) { ran = true; return []byte("x"), nil }
	check := func(name string, f func() error) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panicked: %v", name, r)
			}
		}()
		if err := f(); !errors.Is(err, pgstore.ErrConfig) {
			t.Errorf("%s = %v; want ErrConfig", name, err)
		}
	}
	for _, z := range []*pgstore.Store{{}, nil} {
		check("Acquire", func() error { _, err := z.Acquire(ctx, store.AcquireParams{ID: id}); return err })
		check("Complete", func() error { return z.Complete(ctx, store.CompleteParams{}) })
		check("Extend", func() error { return z.Extend(ctx, store.ExtendParams{}) })
		check("Release", func() error { return z.Release(ctx, store.LeaseRef{ID: id}) })
		check("MarkUnknown", func() error { return z.MarkUnknown(ctx, store.MarkUnknownParams{}) })
		check("Claim", func() error { _, err := z.Claim(ctx, store.ClaimParams{ID: id}); return err })
		check("Resolve", func() error { return z.Resolve(ctx, store.ResolveParams{}) })
		check("ListUnknown", func() error { _, err := z.ListUnknown(ctx, store.ListParams{Tenant: "acme"}); return err })
		check("Get", func() error { _, err := z.Get(ctx, id); return err })
		check("Delete", func() error { _, err := z.Delete(ctx, store.DeleteParams{ID: id}); return err })
		check("Reap", func() error { _, err := z.Reap(ctx, 10); return err })
		check("Close", func() error { return z.Close() })
		check("Reserve", func() error { return z.Reserve(ctx, tx, "acme", "zero", 1) })
		check("Settle", func() error { return z.Settle(ctx, tx, "acme", "zero", 1, nil) })
		check("Reservation", func() error { _, err := z.Reservation(ctx, pool, "acme", "zero"); return err })
		check("Guard under Do", func() error {
			_, _, err := e.Do(ctx, idem.Request{Tenant: "acme", Key: "zero", NoFingerprint: true},
				func(ctx context.Context, l *idem.Lease) ([]byte, error) {
					guarded := false // as the docs show: Guard's work is this work's only effect
					out, err := z.Guard(ctx, pool, l, func(tx pgx.Tx) ([]byte, error) { guarded = true; return work(tx) })
					if err != nil && !guarded {
						return nil, idem.NotRun(err)
					}
					return out, err
				})
			if !idem.Retryable(err) {
				t.Errorf("Do with a zero store's Guard, marked NotRun as the docs show = %v; want the key released", err)
			}
			return err
		})
	}
	attempt, err := e.Begin(ctx, idem.Request{Tenant: "acme", Key: "zero-args", NoFingerprint: true})
	if err != nil {
		t.Fatal(err)
	}
	defer attempt.Lease.Close()
	check("Guard(nil db)", func() error { _, err := s.Guard(ctx, nil, attempt.Lease, work); return err })
	check("Guard(nil lease)", func() error { _, err := s.Guard(ctx, pool, nil, work); return err })
	check("Guard(nil work)", func() error { _, err := s.Guard(ctx, pool, attempt.Lease, nil); return err })
	check("Reserve(nil tx)", func() error { return s.Reserve(ctx, nil, "acme", "zero", 1) })
	check("Settle(nil tx)", func() error { return s.Settle(ctx, nil, "acme", "zero", 1, nil) })
	check("FencedExec(nil tx)", func() error { return pgstore.FencedExec(ctx, nil, "SELECT 1") })
	check("Reservation(nil querier)", func() error { _, err := s.Reservation(ctx, nil, "acme", "zero"); return err })
	check("Migrate(nil db)", func() error { return pgstore.Migrate(ctx, nil, nil) })
	check("Pending(nil db)", func() error { _, err := pgstore.Pending(ctx, nil, nil); return err })
	if ran {
		t.Error("the work ran")
	}
}
