package idemhttp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// TestDownstreamInFlightNotStored: a handler that passes on a downstream
// idem service's "this key is running" (409 key_in_flight, or 429
// lock_timeout in the stripe format) leaves its key UNKNOWN: the retry
// does not run the handler again, and does not get the passed-on answer
// replayed as final, for the downstream work may complete.
func TestDownstreamInFlightNotStored(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		for _, tc := range []struct {
			format idemhttp.ErrorFormat
			status int
		}{{idemhttp.ErrorFormatProblem, 409}, {idemhttp.ErrorFormatStripe, 429}} {
			t.Run(tc.format.String(), func(t *testing.T) {
				started, finish := make(chan struct{}), make(chan struct{})
				down := serve(t, newMiddleware(t, newEngine(t, newStore(t), nil), &idemhttp.Options{ErrorFormat: tc.format})(
					http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						close(started) // the downstream's side effect is under way
						<-finish
					})))
				first := make(chan struct{})
				go func() {
					defer close(first)
					res, err := down.Client().Do(call{key: "down-k"}.request(t, down.URL))
					if err == nil {
						res.Body.Close()
					}
				}()
				defer func() {
					close(finish)
					<-first
				}()
				<-started
				var calls atomic.Int64
				e := newEngine(t, newStore(t), nil)
				srv := serve(t, newMiddleware(t, e, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					calls.Add(1)
					res, err := down.Client().Do(call{key: "down-k"}.request(t, down.URL))
					if err != nil {
						t.Error(err)
						return
					}
					defer res.Body.Close()
					w.Header().Set("Content-Type", res.Header.Get("Content-Type"))
					w.WriteHeader(res.StatusCode) // passed on as it is
					io.Copy(w, res.Body)
				})))
				if r := (call{key: "k"}).send(t, srv); r.status != tc.status {
					t.Fatalf("first answer %d %s; want the downstream's %d passed on", r.status, r.body, tc.status)
				}
				r := call{key: "k"}.send(t, srv)
				checkProblem(t, r, 503, idemhttp.CodeOutcomeUnknown)
				if n := calls.Load(); n != 1 {
					t.Fatalf("the handler ran %d times while its downstream key was in flight, want 1", n)
				}
				rec, err := e.Get(context.Background(), store.ID{Key: "k"})
				if err != nil || rec.State != store.StateUnknown || !strings.Contains(rec.Reason, "downstream key was in flight") {
					t.Fatalf("record %v %q, %v; want UNKNOWN, a downstream key in flight", rec.State, rec.Reason, err)
				}
			})
		}
	})
}

// TestPassedOnInFlightRecognised: only the answers idem and Stripe give
// for a key that is running turn the key UNKNOWN; a business 409, or an
// answer that merely resembles them, keeps the status policy's word.
func TestPassedOnInFlightRecognised(t *testing.T) {
	const (
		problem = "application/problem+json"
		json    = "application/json"
	)
	for _, tc := range []struct {
		name   string
		status int
		ct     string
		body   string
		want   store.State // after the first request
	}{
		{"stripe's idempotency_key_in_use", 409, json + "; charset=utf-8",
			`{"error":{"code":"idempotency_key_in_use","type":"idempotency_error","message":"There is currently another in-progress request using this Idempotent Key"}}`, store.StateUnknown},
		{"idem's problem, header spelled otherwise", 409, "Application/Problem+JSON ; charset=utf-8",
			`{"type":"x","code":"key_in_flight","status":409}`, store.StateUnknown},
		{"business 409 problem", 409, problem, `{"code":"order_conflict","status":409}`, store.StateCompleted},
		{"key_in_flight as plain JSON", 409, json, `{"code":"key_in_flight"}`, store.StateCompleted},
		{"key_in_flight as text", 409, "text/plain", `{"code":"key_in_flight"}`, store.StateCompleted},
		{"key_in_flight in a detail", 409, problem, `{"code":"order_conflict","detail":"{\"code\":\"key_in_flight\"}"}`, store.StateCompleted},
		{"key_in_flight at another status", 400, problem, `{"code":"key_in_flight"}`, store.StateCompleted},
		{"idem_code key_in_flight at 409", 409, json, `{"error":{"code":"lock_timeout","idem_code":"key_in_flight"}}`, store.StateCompleted},
		{"stripe's lock_timeout alone", 429, json, `{"error":{"code":"lock_timeout"}}`, 0}, // released, as every 429
		{"not JSON", 409, problem, `{"code":"key_in_flight"`, store.StateCompleted},
		{"too large", 409, problem, `{"code":"key_in_flight","pad":"` + strings.Repeat("x", 8<<10) + `"}`, store.StateCompleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := memstore.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			e := newEngine(t, s, nil)
			srv := serve(t, newMiddleware(t, e, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", tc.ct)
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})))
			call{key: "k"}.send(t, srv)
			rec, err := e.Get(context.Background(), store.ID{Key: "k"})
			if tc.want == 0 {
				if err == nil {
					t.Fatalf("record %v; want the key released", rec.State)
				}
				return
			}
			if err != nil || rec.State != tc.want {
				t.Fatalf("record %v %q, %v; want %v", rec.State, rec.Reason, err, tc.want)
			}
			r := call{key: "k"}.send(t, srv)
			if tc.want == store.StateCompleted && (r.status != tc.status || string(r.body) != tc.body) {
				t.Fatalf("retry got %d %s; want the stored answer replayed", r.status, r.body)
			}
			if calls.Load() != 1 {
				t.Fatalf("the handler ran %d times, want 1", calls.Load())
			}
		})
	}
}
