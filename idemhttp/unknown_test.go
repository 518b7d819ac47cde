package idemhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// TestSetDisposition: a handler's declaration beats the status policy:
// a 201 declared unknown makes the key UNKNOWN, a 502 declared released
// lets the retry run.
func TestSetDisposition(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		var calls atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			switch r.URL.Query().Get("as") {
			case "unknown":
				if !idemhttp.SetDisposition(r.Context(), idemhttp.DispositionUnknown, "sent, not answered") {
					t.Error("SetDisposition refused the handler's context")
				}
				w.WriteHeader(http.StatusCreated)
			case "release":
				idemhttp.SetDisposition(r.Context(), idemhttp.DispositionRelease, "")
				w.WriteHeader(http.StatusBadGateway)
			}
		})
		var outs outcomes
		e := newEngine(t, newStore(t), nil)
		srv := serve(t, newMiddleware(t, e, &idemhttp.Options{OnOutcome: outs.record})(h))
		unknown := call{key: "u", path: "/?as=unknown"}
		if r := unknown.send(t, srv); r.status != 201 {
			t.Fatalf("first answer %d; want the handler's 201", r.status)
		}
		r := unknown.send(t, srv)
		checkProblem(t, r, 503, idemhttp.CodeOutcomeUnknown)
		if calls.Load() != 1 {
			t.Fatalf("an UNKNOWN key ran again: %d calls", calls.Load())
		}
		rec, err := e.Get(context.Background(), store.ID{Key: "u"})
		if err != nil || rec.State != store.StateUnknown || rec.Reason != "sent, not answered" {
			t.Fatalf("record %v %q, %v; want UNKNOWN with the declared reason", rec.State, rec.Reason, err)
		}
		release := call{key: "r", path: "/?as=release"}
		release.send(t, srv)
		if r := release.send(t, srv); r.status != 502 || calls.Load() != 3 {
			t.Fatalf("retry of a released 502: %d after %d calls; want a second run", r.status, calls.Load())
		}
		if outs.count(idemhttp.OutcomeMarkedUnknown) != 1 || outs.count(idemhttp.OutcomeKeyUnknown) != 1 || outs.count(idemhttp.OutcomeReleased) != 2 {
			t.Errorf("outcomes %v", outs.list)
		}
	})
	if idemhttp.SetDisposition(context.Background(), idemhttp.DispositionUnknown, "") {
		t.Error("SetDisposition outside a protected handler reported true")
	}
}

// TestUnknownRetryAfterPolicy (issue 32 item 7): with no reconciliation,
// nothing settles an UNKNOWN key by itself, and the 503 outcome_unknown
// invites no retry (no Retry-After), as idemgrpc gives no RetryInfo; a
// service whose operators settle keys within a known time says so with
// UnknownRetryAfter.
func TestUnknownRetryAfterPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			after time.Duration
			want  []string
		}{{0, nil}, {90 * time.Second, []string{"90"}}} {
			s, err := memstore.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGatewayTimeout) })
			mw := newMiddleware(t, newEngine(t, s, nil), &idemhttp.Options{UnknownRetryAfter: tc.after})(h)
			for range 2 {
				rec := httptest.NewRecorder()
				mw.ServeHTTP(rec, call{key: "k"}.request(t, "http://example.test"))
				if rec.Code == http.StatusServiceUnavailable {
					checkProblem(t, recorded(rec), 503, idemhttp.CodeOutcomeUnknown)
					if got := rec.Header()["Retry-After"]; !slices.Equal(got, tc.want) {
						t.Errorf("UnknownRetryAfter %v: Retry-After %q; want %q", tc.after, got, tc.want)
					}
				}
			}
		}
	})
}

// TestUnknownRetryAfterFromEngine: with a reconciliation configured, the
// 503 outcome_unknown asks the client back after the engine's
// ReconcileTimeout; when the reconciliation finds the result, the retry
// gets it replayed, and the handler never runs twice.
func TestUnknownRetryAfterFromEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		var known atomic.Bool // whether the downstream can answer for the key yet
		e := newEngine(t, s, &idem.Options{ReconcileTimeout: 3 * time.Second,
			Reconcile: func(ctx context.Context, rec store.Record) (idem.Resolution, error) {
				if !known.Load() {
					return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
				}
				return idem.Resolution{Verdict: idem.VerdictCompleted, Result: store.Result{Status: 201, Body: []byte("found")}}, nil
			}})
		var calls atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.WriteHeader(http.StatusGatewayTimeout)
		})
		mw := newMiddleware(t, e, nil)(h)
		serveOnce := func() *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			mw.ServeHTTP(rec, call{key: "k"}.request(t, "http://example.test"))
			return rec
		}
		serveOnce()
		r := serveOnce()
		checkProblem(t, recorded(r), 503, idemhttp.CodeOutcomeUnknown)
		if ra := r.Header().Get("Retry-After"); ra != "3" {
			t.Errorf("Retry-After %q; want 3 (the ReconcileTimeout)", ra)
		}
		known.Store(true)
		// The failed reconciliation's claim (one per key across processes)
		// runs out before the next one is asked.
		time.Sleep(3*time.Second + 2*time.Second + time.Millisecond)
		if r := serveOnce(); r.Code != 201 || r.Body.String() != "found" || r.Header().Get(idemhttp.HeaderReplayed) != "true" {
			t.Fatalf("after reconciliation: %d %q; want the reconciled 201 replayed", r.Code, r.Body)
		}
		if calls.Load() != 1 {
			t.Fatalf("handler ran %d times; want 1", calls.Load())
		}
	})
}

// TestTimeoutHandlerInside503IsUnknown: http.TimeoutHandler inside the
// middleware answers 503 while the handler goes on to charge. The key
// turns UNKNOWN: the retry gets 503 outcome_unknown and does not charge
// again (a released 503 ran the charge twice).
func TestTimeoutHandlerInside503IsUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := memstore.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		var calls, charges atomic.Int64
		slow := make(chan struct{})
		h := http.TimeoutHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			<-slow
			charges.Add(1)
		}), time.Second, "timeout")
		mw := newMiddleware(t, newEngine(t, s, nil), nil)(h)
		first := httptest.NewRecorder()
		mw.ServeHTTP(first, call{key: "k"}.request(t, "http://example.test"))
		if first.Code != http.StatusServiceUnavailable {
			t.Fatalf("first answer %d; want the TimeoutHandler's 503", first.Code)
		}
		retry := httptest.NewRecorder()
		mw.ServeHTTP(retry, call{key: "k"}.request(t, "http://example.test"))
		close(slow)
		synctest.Wait()
		checkProblem(t, recorded(retry), 503, idemhttp.CodeOutcomeUnknown)
		if calls.Load() != 1 || charges.Load() != 1 {
			t.Fatalf("handler ran %d times, charged %d; want 1 and 1", calls.Load(), charges.Load())
		}
	})
}

// slowAcquire delays the answer of every Acquire by delay, after the
// store took the key: the reply of a store that stalled.
type slowAcquire struct {
	store.Store
	delay time.Duration
}

func (s *slowAcquire) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	res, err := s.Store.Acquire(ctx, p)
	time.Sleep(s.delay)
	return res, err
}

// TestLeaseEndedBeforeHandler: an acquire whose answer came after the
// lease it granted had already ended never runs the handler: 503
// lease_lost, the key released (nothing ran), and the retry runs it.
func TestLeaseEndedBeforeHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms, err := memstore.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		s := &slowAcquire{Store: ms, delay: 150 * time.Millisecond}
		var calls atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.WriteHeader(http.StatusCreated)
		})
		var outs outcomes
		mw := newMiddleware(t, newEngine(t, s, &idem.Options{LeaseDuration: 100 * time.Millisecond}), &idemhttp.Options{OnOutcome: outs.record})(h)
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, call{key: "k"}.request(t, "http://example.test"))
		checkProblem(t, recorded(rec), 503, idemhttp.CodeLeaseLost)
		if calls.Load() != 0 {
			t.Fatal("the handler ran after its lease ended")
		}
		if _, err := ms.Get(context.Background(), store.ID{Key: "k"}); err != idem.ErrNotFound {
			t.Fatalf("key after a lease that ended before the handler: %v; want it released", err)
		}
		s.delay = 0
		rec = httptest.NewRecorder()
		mw.ServeHTTP(rec, call{key: "k"}.request(t, "http://example.test"))
		if rec.Code != 201 || calls.Load() != 1 || outs.count(idemhttp.OutcomeLeaseLost) != 1 {
			t.Fatalf("retry: %d, %d calls, outcomes %v; want one run", rec.Code, calls.Load(), outs.list)
		}
	})
}
