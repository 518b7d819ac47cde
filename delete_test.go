package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// Issue 22, item 3: Delete refuses a key whose work may be running
// (PROCESSING) or may have run without a known result (UNKNOWN, or a
// lease that ended), changing nothing; ForceDelete deletes it anyway.
func TestDeleteRefusesKeysInFlightOrUnknown(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		ctx := context.Background()
		e := newEngine(t, s, &idem.Options{LeaseDuration: time.Second})
		running := idem.Request{Tenant: "acme", Key: "running", NoFingerprint: true}
		a := begin(t, e, running)
		ok, err := e.Delete(ctx, running.ID())
		var inFlight *idem.InFlightError
		if ok || !errors.As(err, &inFlight) || inFlight.RetryAfter <= 0 || inFlight.RetryAfter > time.Second {
			t.Fatalf("Delete(PROCESSING) = %v, %v; want an *InFlightError with the rest of the lease", ok, err)
		}
		if err := a.Lease.Check(); err != nil {
			t.Fatalf("the lease after a refused Delete: %v", err)
		}

		unknown := idem.Request{Tenant: "acme", Key: "unknown", NoFingerprint: true}
		markUnknown(t, e, unknown)
		if ok, err := e.Delete(ctx, unknown.ID()); ok || !errors.Is(err, idem.ErrOutcomeUnknown) {
			t.Fatalf("Delete(UNKNOWN) = %v, %v; want ErrOutcomeUnknown", ok, err)
		}
		if rec, err := e.Get(ctx, unknown.ID()); err != nil || rec.State != idem.StateUnknown {
			t.Fatalf("after a refused Delete: %+v, %v; want the key still UNKNOWN", rec, err)
		}

		if err := a.Lease.Complete(ctx, idem.Result{Body: []byte("done")}); err != nil {
			t.Fatal(err)
		}
		if ok, err := e.Delete(ctx, running.ID()); !ok || err != nil {
			t.Fatalf("Delete(COMPLETED) = %v, %v; want true, nil", ok, err)
		}
		if ok, err := e.Delete(ctx, running.ID()); ok || err != nil {
			t.Fatalf("Delete(absent) = %v, %v; want false, nil", ok, err)
		}
		if ok, err := e.ForceDelete(ctx, unknown.ID()); !ok || err != nil {
			t.Fatalf("ForceDelete(UNKNOWN) = %v, %v; want true, nil", ok, err)
		}
		b := begin(t, e, running)
		if ok, err := e.ForceDelete(ctx, running.ID()); !ok || err != nil {
			t.Fatalf("ForceDelete(PROCESSING) = %v, %v; want true, nil", ok, err)
		}
		if err := b.Lease.Complete(ctx, idem.Result{}); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("Complete after ForceDelete = %v; want ErrLeaseLost", err)
		}
	})
}
