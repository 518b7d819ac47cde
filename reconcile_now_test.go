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

// longerRetentions are requests whose route (or a reload) keeps them
// longer than the engine's retention: by a retention, or a key retention.
var longerRetentions = []idem.Request{
	{Key: "route-retention", Fingerprint: "fp", Retention: time.Hour},
	{Key: "route-key-retention", Fingerprint: "fp", KeyRetention: time.Hour},
}

// A key that a request marked UNKNOWN under its own, longer retention or
// key retention (a route's, or one a reload raised), and that the
// engine's sweep then reconciles as completed, is replayed as long as its
// UNKNOWN record would have lived, not for the engine's retention: with
// it a retry got 410 key_expired early.
func TestReconciliationKeepsTheReplayForItsRequestsRetention(t *testing.T) {
	for _, req := range longerRetentions {
		t.Run(req.Key, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s store.Store) {
				e := newEngine(t, s, &idem.Options{Retention: 100 * time.Millisecond,
					Reconcile: func(ctx context.Context, rec idem.Record) (idem.Resolution, error) {
						return idem.Resolution{Verdict: idem.VerdictCompleted, Result: idem.Result{Body: []byte("charged")}}, nil
					}})
				a := begin(t, e, req)
				if err := a.Lease.MarkUnknown(context.Background(), "the provider timed out"); err != nil {
					t.Fatal(err)
				}
				if stats, err := e.ReconcileAll(context.Background()); err != nil || stats.Completed != 1 {
					t.Fatalf("ReconcileAll = %+v, %v; want one key completed", stats, err)
				}
				time.Sleep(300 * time.Millisecond) // past the engine's retention (in the bubble, its clock)
				if r := begin(t, e, req); r.Outcome != idem.Replayed || string(r.Result.Body) != "charged" {
					t.Fatalf("after the engine's retention = %v %+v; want the reconciled result replayed: the key's UNKNOWN record had an hour to live", r.Outcome, r.Record)
				}
			})
		})
	}
}

// An operator's resolution keeps the replay as a reconciliation does: as
// long as the UNKNOWN record would have lived under its request's longer
// retention or key retention, not for the engine's.
func TestResolveKeepsTheReplayForItsRequestsRetention(t *testing.T) {
	for _, req := range longerRetentions {
		t.Run(req.Key, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s store.Store) {
				e := newEngine(t, s, &idem.Options{Retention: 100 * time.Millisecond})
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
				time.Sleep(300 * time.Millisecond) // past the engine's retention (in the bubble, its clock)
				if r := begin(t, e, req); r.Outcome != idem.Replayed || string(r.Result.Body) != "charged" {
					t.Fatalf("after the engine's retention = %v %+v; want the resolved result replayed: the key's UNKNOWN record had an hour to live", r.Outcome, r.Record)
				}
			})
		})
	}
}
