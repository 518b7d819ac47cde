package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// Issue 22, item 9: a key whose lookup fails, or answers unknown, is left
// alone by the next sweeps for a backoff that doubles up to a cap; a
// lookup that settles it ends its backoff; a sweep logs nothing per key.
func TestReconcileAllBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu     sync.Mutex
			asked  = map[string]int{}
			settle atomic.Bool // c is found not executed from now on
		)
		var logs strings.Builder
		s, _ := memstore.New(nil)
		e := newEngine(t, s, &idem.Options{ReconcileRate: 1000, ReconcileBackoff: time.Minute, ReconcileMaxBackoff: 4 * time.Minute,
			Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			Reconcile: func(ctx context.Context, rec idem.Record) (idem.Resolution, error) {
				mu.Lock()
				asked[rec.Key]++
				mu.Unlock()
				switch {
				case rec.Key == "b":
					return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
				case rec.Key == "c" && settle.Load():
					return idem.Resolution{Verdict: idem.VerdictNotExecuted}, nil
				}
				return idem.Resolution{}, errors.New("lookup: 500")
			}})
		for _, k := range []string{"a", "b", "c"} {
			markUnknown(t, e, idem.Request{Tenant: "acme", Key: k, NoFingerprint: true})
		}
		pass := func(wantAsked string, want idem.ReconcileStats) {
			t.Helper()
			mu.Lock()
			clear(asked)
			mu.Unlock()
			st, err := e.ReconcileAll(context.Background())
			mu.Lock()
			got := ""
			for _, k := range []string{"a", "b", "c"} {
				got += strings.Repeat(k, asked[k])
			}
			mu.Unlock()
			if err != nil || got != wantAsked || st.Unknown != want.Unknown || st.Failed != want.Failed ||
				st.NotExecuted != want.NotExecuted || st.BackedOff != want.BackedOff || (st.Failed > 0) != (st.FirstError != nil) {
				t.Fatalf("sweep asked %q: %+v, %v; want %q asked, %+v", got, st, err, wantAsked, want)
			}
		}
		pass("abc", idem.ReconcileStats{Unknown: 3, Failed: 2}) // backoff 1 min
		pass("", idem.ReconcileStats{BackedOff: 3})
		time.Sleep(time.Minute)
		pass("abc", idem.ReconcileStats{Unknown: 3, Failed: 2}) // 2 min
		time.Sleep(time.Minute)
		pass("", idem.ReconcileStats{BackedOff: 3})
		time.Sleep(time.Minute)
		pass("abc", idem.ReconcileStats{Unknown: 3, Failed: 2}) // 4 min
		settle.Store(true)
		time.Sleep(3 * time.Minute)
		pass("", idem.ReconcileStats{BackedOff: 3})
		time.Sleep(time.Minute)
		pass("abc", idem.ReconcileStats{Unknown: 2, Failed: 1, NotExecuted: 1}) // still 4 min: the cap
		time.Sleep(4 * time.Minute)
		pass("ab", idem.ReconcileStats{Unknown: 2, Failed: 1})
		if logs.Len() != 0 {
			t.Fatalf("the sweeps logged:\n%s\nwant nothing per key (the caller logs a pass)", logs.String())
		}
	})
}

func TestReconcileOptionsChecked(t *testing.T) {
	s, _ := memstore.New(nil)
	for _, o := range []idem.Options{{ReconcileRate: -1}, {ReconcileRate: math.NaN()}, {ReconcileConcurrency: -1}, {ReconcileBackoff: -time.Second},
		{ReconcileBackoff: time.Hour, ReconcileMaxBackoff: time.Minute}} {
		if _, err := idem.New(s, &o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

// A key whose owner's process died mid-work is listed, from its lease's
// end, and the sweep settles it, with no retry of the key and no Get:
// before issue 31 (item 6) it was in no listing until a retry met it, and
// ReconcileAll never asked about it.
func TestSweepSettlesAnAbandonedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s, _ := memstore.New(nil) // the bubble's clock
		crashed := newEngine(t, s, &idem.Options{LeaseDuration: time.Minute, RenewEvery: -1, Logger: slog.New(slog.DiscardHandler)})
		req := idem.Request{Tenant: "acme", Key: "charge-1", Fingerprint: "fp"}
		a := begin(t, crashed, req)
		if a.Outcome != idem.Acquired {
			t.Fatalf("Begin = %v; want Acquired", a.Outcome)
		} // the work runs, and its process dies before it says anything
		e := newEngine(t, s, &idem.Options{Reconcile: func(ctx context.Context, rec idem.Record) (idem.Resolution, error) {
			return idem.Resolution{Verdict: idem.VerdictCompleted, Result: idem.Result{Status: 201, Body: []byte("found downstream")}}, nil
		}})
		if page, err := e.ListUnknown(ctx, idem.ListParams{AllTenants: true}); err != nil || len(page.Records) != 0 {
			t.Fatalf("ListUnknown while the lease holds = %+v, %v; want nothing", page.Records, err)
		}
		time.Sleep(time.Minute)
		page, err := e.ListUnknown(ctx, idem.ListParams{AllTenants: true})
		if err != nil || len(page.Records) != 1 || page.Records[0].ID != req.ID() || page.Records[0].Reason != store.ReasonAbandoned ||
			page.Records[0].Fence != a.Lease.Fence() || !page.Records[0].CompletedAt.Equal(time.Now()) {
			t.Fatalf("ListUnknown at the lease's end = %+v, %v; want the key, abandoned, fence %d, unknown since now", page.Records, err, a.Lease.Fence())
		}
		if st, err := e.ReconcileAll(ctx); err != nil || st.Completed != 1 {
			t.Fatalf("ReconcileAll = %+v, %v; want the abandoned key completed", st, err)
		}
		if r := begin(t, e, req); r.Outcome != idem.Replayed || string(r.Result.Body) != "found downstream" {
			t.Fatalf("retry after the sweep = %v; want the reconciled result replayed", r.Outcome)
		}
	})
}
