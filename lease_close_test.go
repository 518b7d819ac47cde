package idem_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/pgstore"
)

// Issue 32 item 8: the Begin flow's deferred close. `defer lease.Release()`
// would free, after a panic past the side effect, a key whose work ran;
// Lease.Close, deferred right after Begin, marks such a key UNKNOWN, and
// does nothing after Complete, Release or a lost lease.
func TestLeaseCloseIsSafeToDefer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mustMem(t), nil)
		ctx := context.Background()
		charges := 0
		pay := func(key string, then func(l *idem.Lease)) {
			defer func() { recover() }()
			att := begin(t, e, idem.Request{Key: key, NoFingerprint: true})
			if att.Outcome != idem.Acquired {
				t.Fatalf("%s: %v; want Acquired", key, att.Outcome)
			}
			defer att.Lease.Close()
			charges++ // the side effect
			then(att.Lease)
		}
		pay("panicked", func(*idem.Lease) { panic("after the charge") })
		pay("completed", func(l *idem.Lease) { l.Complete(ctx, idem.Result{Body: []byte("ch_2")}) })
		pay("released", func(l *idem.Lease) { l.Release(ctx) })
		pay("forgotten", func(*idem.Lease) {})
		pay("deleted", func(l *idem.Lease) { e.ForceDelete(ctx, l.ID()) })
		for key, want := range map[string]idem.Decision{"panicked": idem.Unknown, "completed": idem.Replayed,
			"released": idem.Acquired, "forgotten": idem.Unknown, "deleted": idem.Acquired} {
			a := begin(t, e, idem.Request{Key: key, NoFingerprint: true})
			if a.Outcome != want {
				t.Errorf("%s: a retry finds %v; want %v", key, a.Outcome, want)
			}
			if a.Lease != nil {
				if err := a.Lease.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if err := a.Lease.Close(); err != nil {
					t.Errorf("Close after Release = %v; want nil", err)
				}
			}
		}
	})
}

// Issue 32 item 8: Lease.Complete records what ran even when the context
// it is given has ended (the caller went away): it detaches itself. It
// used to fail with the context's error, and without the engine's hold
// the result was lost and the key left PROCESSING.
func TestCompleteDoesNotEndWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mustMem(t), &idem.Options{MaxHeld: -1})
		att := begin(t, e, idem.Request{Key: "k", NoFingerprint: true})
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		if err := att.Lease.Complete(gone, idem.Result{Body: []byte("ch_1")}); err != nil {
			t.Fatalf("Complete on an ended context = %v; want it recorded", err)
		}
		if r := begin(t, e, idem.Request{Key: "k", NoFingerprint: true}); r.Outcome != idem.Replayed {
			t.Fatalf("retry = %v; want Replayed", r.Outcome)
		}
	})
}

// Issue 32 item 9: Engine.Shutdown, named and shaped as
// http.Server.Shutdown: after it, nothing new is taken.
func TestShutdownRefusesNewWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mustMem(t), nil)
		ctx := context.Background()
		held := begin(t, e, idem.Request{Key: "running", NoFingerprint: true})
		if err := e.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Begin(ctx, idem.Request{Key: "new", NoFingerprint: true}); !errors.Is(err, idem.ErrShutdown) {
			t.Fatalf("Begin after Shutdown = %v; want ErrShutdown", err)
		}
		if err := held.Lease.Complete(ctx, idem.Result{Body: []byte("done")}); err != nil { // work in flight finishes
			t.Fatalf("Complete of a lease held before Shutdown = %v", err)
		}
	})
}

// Issue 32 item 6: one error value per concept, whichever package names
// it, as os.ErrNotExist is fs.ErrNotExist.
func TestOneErrorPerConcept(t *testing.T) {
	if pgstore.ErrStaleFence != idem.ErrStaleFence {
		t.Error("pgstore.ErrStaleFence is not idem.ErrStaleFence")
	}
	if idemhttp.ErrTenantMissing != idemgrpc.ErrTenantMissing || idemhttp.ErrTenantMissing != idem.ErrTenantMissing {
		t.Error("idemhttp.ErrTenantMissing, idemgrpc.ErrTenantMissing and idem.ErrTenantMissing differ")
	}
	for _, err := range []error{&idemclient.OutcomeUnknownError{}, &idemgrpc.OutcomeUnknownError{}, &idem.OutcomeUnknownError{}, idemclient.ErrOutcomeUnknown} {
		if !errors.Is(err, idem.ErrOutcomeUnknown) {
			t.Errorf("%T does not match idem.ErrOutcomeUnknown", err)
		}
	}
}
