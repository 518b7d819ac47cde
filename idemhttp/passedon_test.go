package idemhttp_test

import (
	"bytes"
	"compress/gzip"
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

// TestPassedOnInFlightEncoded: a key in flight passed on gzip-encoded (a
// compressing middleware inside idemhttp, or a downstream that was asked
// for gzip) is recognised as it is in plain text, and turns the key
// UNKNOWN. What is not recognised is stored as the client got it, its
// Content-Encoding with it: a retry gets the same bytes, labelled the
// same. An encoding that is not gzip is not read (the status policy
// decides, as before), nor is a gzip body that decodes past 4 KiB.
func TestPassedOnInFlightEncoded(t *testing.T) {
	gz := func(s string) string {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		io.WriteString(zw, s)
		zw.Close()
		return b.String()
	}
	const (
		problem  = "application/problem+json"
		json     = "application/json"
		inFlight = `{"type":"x","code":"key_in_flight","status":409}`
	)
	for _, tc := range []struct {
		name   string
		status int
		ct     string
		enc    string
		body   string
		want   store.State
	}{
		{"idem's problem, gzip", 409, problem, "gzip", gz(inFlight), store.StateUnknown},
		{"idem's problem, GZIP", 409, problem, "GZIP", gz(inFlight), store.StateUnknown},
		{"stripe's key in use, x-gzip", 409, json, "x-gzip",
			gz(`{"error":{"code":"idempotency_key_in_use","type":"idempotency_error"}}`), store.StateUnknown},
		{"idem's stripe format, gzip", 429, json, "gzip", gz(`{"error":{"code":"lock_timeout","idem_code":"key_in_flight"}}`), store.StateUnknown},
		{"business 409, gzip", 409, problem, "gzip", gz(`{"code":"order_conflict","status":409}`), store.StateCompleted},
		{"br, not read", 409, problem, "br", "\x8b\x07\x80" + inFlight, store.StateCompleted},
		{"gzip then br, not read", 409, problem, "gzip, br", gz(inFlight), store.StateCompleted},
		{"not gzip", 409, problem, "gzip", inFlight, store.StateCompleted},
		{"too large decoded", 409, problem, "gzip",
			gz(`{"code":"key_in_flight","pad":"` + strings.Repeat("x", 8<<10) + `"}`), store.StateCompleted},
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
				w.Header().Set("Content-Encoding", tc.enc)
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			})))
			// Asked for explicitly, gzip is not undone by the client's
			// transport: the test sees the bytes and the header sent.
			c := call{key: "k", header: map[string]string{"Accept-Encoding": "gzip"}}
			if r := c.send(t, srv); r.status != tc.status || string(r.body) != tc.body {
				t.Fatalf("first answer %d %q; want the handler's", r.status, r.body)
			}
			rec, err := e.Get(context.Background(), store.ID{Key: "k"})
			if err != nil || rec.State != tc.want {
				t.Fatalf("record %v %q, %v; want %v", rec.State, rec.Reason, err, tc.want)
			}
			r := c.send(t, srv)
			switch tc.want {
			case store.StateUnknown:
				checkProblem(t, r, 503, idemhttp.CodeOutcomeUnknown)
			case store.StateCompleted:
				if r.status != tc.status || string(r.body) != tc.body || r.header.Get("Content-Encoding") != tc.enc {
					t.Fatalf("retry got %d %q Content-Encoding %q; want the stored answer replayed as it was sent (%q)",
						r.status, r.body, r.header.Get("Content-Encoding"), tc.enc)
				}
			}
			if calls.Load() != 1 {
				t.Fatalf("the handler ran %d times, want 1", calls.Load())
			}
		})
	}
}
