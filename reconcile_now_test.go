package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

func TestReconcileNow(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		var asked atomic.Int32
		e := newEngine(t, s, &idem.Options{Reconcile: func(ctx context.Context, rec idem.Record) (idem.Resolution, error) {
			asked.Add(1)
			switch rec.Key {
			case "charged":
				return idem.Resolution{Verdict: idem.VerdictCompleted, Result: idem.Result{Status: 201, Body: []byte("ch_1")}}, nil
			case "never-sent":
				return idem.Resolution{Verdict: idem.VerdictNotExecuted}, nil
			}
			return idem.Resolution{}, errors.New("provider lookup failed")
		}})
		ctx := context.Background()
		charged := markUnknown(t, e, idem.Request{Tenant: "ops", Key: "charged", NoFingerprint: true})
		v, rec, err := e.Reconcile(ctx, charged.ID)
		if err != nil || v != idem.VerdictCompleted || rec.State != idem.StateCompleted || rec.Fence != charged.Fence ||
			rec.Result == nil || string(rec.Result.Body) != "ch_1" {
			t.Fatalf("Reconcile of a key the lookup found = %v %+v, %v; want completed with its result", v, rec, err)
		}
		if r := begin(t, e, idem.Request{Tenant: "ops", Key: "charged", NoFingerprint: true}); r.Outcome != idem.Replayed || r.Result.Status != 201 {
			t.Fatalf("retry after Reconcile = %v; want the found result replayed", r.Outcome)
		}

		never := markUnknown(t, e, idem.Request{Tenant: "ops", Key: "never-sent", NoFingerprint: true})
		if v, rec, err := e.Reconcile(ctx, never.ID); err != nil || v != idem.VerdictNotExecuted || rec != (idem.Record{}) {
			t.Fatalf("Reconcile of a key never sent = %v %+v, %v; want not_executed and no record", v, rec, err)
		}
		if _, err := e.Get(ctx, never.ID); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("Get after not_executed = %v; want ErrNotFound: the key is released", err)
		}

		failing := markUnknown(t, e, idem.Request{Tenant: "ops", Key: "lookup-fails", NoFingerprint: true})
		if v, rec, err := e.Reconcile(ctx, failing.ID); err != nil || v != idem.VerdictUnknown || rec.State != idem.StateUnknown || rec.Fence != failing.Fence {
			t.Fatalf("Reconcile with a failing lookup = %v %+v, %v; want unknown, the key still UNKNOWN", v, rec, err)
		}

		before := asked.Load()
		if _, rec, err := e.Reconcile(ctx, charged.ID); !errors.Is(err, idem.ErrNotUnknown) || rec.State != idem.StateCompleted {
			t.Fatalf("Reconcile of a COMPLETED key = %+v, %v; want ErrNotUnknown and the record", rec, err)
		}
		if _, _, err := e.Reconcile(ctx, idem.ID{Tenant: "ops", Key: "absent"}); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("Reconcile of an absent key = %v; want ErrNotFound", err)
		}
		if n := asked.Load(); n != before {
			t.Fatalf("the lookup was asked %d more times about keys that are not UNKNOWN; want 0", n-before)
		}
	})
}

func TestReconcileNowWithoutLookup(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, nil)
		rec := markUnknown(t, e, idem.Request{Tenant: "ops", Key: "k", NoFingerprint: true})
		if _, _, err := e.Reconcile(context.Background(), rec.ID); !errors.Is(err, idem.ErrNoReconcile) {
			t.Fatalf("Reconcile without Options.Reconcile = %v; want ErrNoReconcile", err)
		}
		if _, err := e.ReconcileAll(context.Background()); !errors.Is(err, idem.ErrNoReconcile) {
			t.Fatalf("ReconcileAll without Options.Reconcile = %v; want ErrNoReconcile", err)
		}
		if got, err := e.Get(context.Background(), rec.ID); err != nil || got.State != idem.StateUnknown {
			t.Fatalf("the key after = %+v, %v; want it still UNKNOWN", got, err)
		}
	})
}

// A key that a request marked UNKNOWN under its own, longer key
// retention, and that the engine's sweep then reconciles as completed, is
// remembered for that key retention, not the engine's: else it would run
// again once the response's retention ended (a gateway's reload raises a
// route's key retention; its engine keeps the one it started with).
func TestReconciliationKeepsTheKeyForItsRequestsKeyRetention(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, &idem.Options{Retention: 100 * time.Millisecond,
			Reconcile: func(ctx context.Context, rec idem.Record) (idem.Resolution, error) {
				return idem.Resolution{Verdict: idem.VerdictCompleted, Result: idem.Result{Body: []byte("charged")}}, nil
			}})
		req := idem.Request{Key: "reloaded", Fingerprint: "fp", KeyRetention: time.Hour}
		a := begin(t, e, req)
		if err := a.Lease.MarkUnknown(context.Background(), "the provider timed out"); err != nil {
			t.Fatal(err)
		}
		if stats, err := e.ReconcileAll(context.Background()); err != nil || stats.Completed != 1 {
			t.Fatalf("ReconcileAll = %+v, %v; want one key completed", stats, err)
		}
		time.Sleep(300 * time.Millisecond) // past the response's retention (in the bubble, its clock)
		if r := begin(t, e, req); r.Outcome != idem.Expired {
			t.Fatalf("after the response's retention = %v %+v; want Expired: the key's retention is an hour", r.Outcome, r.Record)
		}
	})
}

// An operator's resolution keeps the key as a reconciliation does: a key
// marked UNKNOWN under its request's longer key retention (a route's, or a
// reload's) is remembered for it, not for the engine's, which would let a
// retry after the response's retention run the work again.
func TestResolveKeepsTheKeyForItsRequestsKeyRetention(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, &idem.Options{Retention: 100 * time.Millisecond})
		req := idem.Request{Key: "resolved", Fingerprint: "fp", KeyRetention: time.Hour}
		a := begin(t, e, req)
		if err := a.Lease.MarkUnknown(context.Background(), "the provider timed out"); err != nil {
			t.Fatal(err)
		}
		rec, err := e.Get(context.Background(), a.Lease.ID())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Resolve(context.Background(), rec.ID, rec.Fence, &idem.Result{Status: 201, Body: []byte("charged")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // past the response's retention (in the bubble, its clock)
		if r := begin(t, e, req); r.Outcome != idem.Expired {
			t.Fatalf("after the response's retention = %v %+v; want Expired: the key's retention is an hour", r.Outcome, r.Record)
		}
	})
}
