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
func TestReconcileUnknownBacksOff(t *testing.T) {
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
			Reconcile: func(ctx context.Context, rec store.Record) (idem.Resolution, error) {
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
			markUnknown(t, e, idem.Key{Tenant: "acme", Key: k, NoFingerprint: true})
		}
		pass := func(wantAsked string, want idem.ReconcileStats) {
			t.Helper()
			mu.Lock()
			clear(asked)
			mu.Unlock()
			st, err := e.ReconcileUnknown(context.Background())
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
