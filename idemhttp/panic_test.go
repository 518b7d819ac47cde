package idemhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// completePanics is a memory store whose Complete panics: a bug in
// recording the result, after the handler ran.
type completePanics struct{ *memstore.Store }

func (completePanics) Complete(context.Context, store.CompleteParams) error { panic("store bug") }

// Issue 31, item 2: a panic after the handler ran (in the status policy,
// in the store's Complete, in OnOutcome) left the key PROCESSING with its
// lease renewed for the life of the process, and every retry got 409.
// Now the key ends stored or UNKNOWN, never in flight, and its lease is
// over (its context done: the renewal is stopped).
func TestPanicAfterTheHandlerEndsTheKey(t *testing.T) {
	for _, tt := range []struct {
		name      string
		policy    func(int) idemhttp.Disposition
		onOutcome func(*http.Request, idemhttp.Outcome)
		store     func(*memstore.Store) store.Store
		panics    bool        // the panic goes on to the server
		state     store.State // the key's state after
		replayed  bool        // the retry replays the response
	}{
		{name: "status policy", policy: func(int) idemhttp.Disposition { var f func(int) idemhttp.Disposition; return f(0) },
			state: store.StateCompleted, replayed: true},
		{name: "OnOutcome after the result was stored", onOutcome: func(_ *http.Request, o idemhttp.Outcome) {
			if o == idemhttp.OutcomeExecuted {
				panic("hook bug")
			}
		}, panics: true, state: store.StateCompleted, replayed: true},
		{name: "the store's Complete", store: func(s *memstore.Store) store.Store { return completePanics{s} },
			panics: true, state: store.StateUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := memstore.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			var s store.Store = ms
			if tt.store != nil {
				s = tt.store(ms)
			}
			leases := make(chan *idem.Lease, 2)
			calls := 0
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls++
				l, _ := idem.LeaseFromContext(r.Context())
				leases <- l
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "charged")
			})
			mw := newMiddleware(t, newEngine(t, s, nil), &idemhttp.Options{StatusPolicy: tt.policy, OnOutcome: tt.onOutcome})(h)
			rec := httptest.NewRecorder()
			func() {
				defer func() {
					if p := recover(); (p != nil) != tt.panics {
						t.Fatalf("recovered %v; want a panic passed on: %v", p, tt.panics)
					}
				}()
				mw.ServeHTTP(rec, call{key: "k"}.request(t, "http://example.test"))
			}()
			if !tt.panics && (rec.Code != http.StatusCreated || rec.Body.String() != "charged") {
				t.Errorf("the first answer = %d %q; want the handler's 201", rec.Code, rec.Body)
			}
			l := <-leases
			if err := l.Context().Err(); err == nil || errors.Is(context.Cause(l.Context()), idem.ErrLeaseExpired) {
				t.Errorf("the lease's context after the request: %v (cause %v); want it ended by its finalize (renewal stopped)", err, context.Cause(l.Context()))
			}
			rec2, err := ms.Get(context.Background(), store.ID{Key: "k"})
			if err != nil || rec2.State != tt.state {
				t.Fatalf("the key after the panic: %v %v; want %v", rec2.State, err, tt.state)
			}
			retry := httptest.NewRecorder()
			mw.ServeHTTP(retry, call{key: "k"}.request(t, "http://example.test"))
			switch {
			case calls != 1:
				t.Fatalf("the handler ran %d times", calls)
			case tt.replayed && (retry.Code != http.StatusCreated || retry.Header().Get(idemhttp.HeaderReplayed) != "true"):
				t.Fatalf("the retry = %d %s; want the stored 201 replayed", retry.Code, retry.Body)
			case !tt.replayed && retry.Code != http.StatusServiceUnavailable:
				t.Fatalf("the retry = %d %s; want 503 outcome_unknown", retry.Code, retry.Body)
			}
		})
	}
}
