package idemhttp_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// stepThen403 is a handler that makes one downstream step (a POST to
// url, its key derived by rt from the handler's scope), optionally
// declares a disposition, and answers 403, as a handler does that passes
// on a second downstream's refusal after the first one charged. runs
// counts its runs; sent reports whether the step got an answer.
func stepThen403(t *testing.T, rt http.RoundTripper, url string, declare bool, runs *atomic.Int32, sent *atomic.Bool) http.Handler {
	client := &http.Client{Transport: rt}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		req, err := http.NewRequestWithContext(idemclient.WithStep(r.Context(), "charge"), http.MethodPost, url, strings.NewReader("amount=1"))
		if err != nil {
			t.Error(err)
			return
		}
		if res, err := client.Do(req); err == nil {
			res.Body.Close()
			sent.Store(true)
		}
		if declare {
			idemhttp.SetDisposition(r.Context(), idemhttp.DispositionRelease, "the provider had no effect")
		}
		w.WriteHeader(http.StatusForbidden)
	})
}

// downstream is a server that counts the requests that carry a key.
func downstream(t *testing.T, keyed *atomic.Int32) *httptest.Server {
	return serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(idemclient.HeaderKey) != "" {
			keyed.Add(1)
		}
		w.WriteHeader(http.StatusCreated)
	}))
}

// closedPort returns the URL of a port nothing listens on: a dial to it
// is refused, and the request never leaves.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/charge"
	ln.Close()
	return url
}

// A 403 after a downstream step was sent does not prove that nothing took
// effect: the step may have charged, and the 403 be another downstream's,
// passed on. DefaultStatusPolicy's release turns the key UNKNOWN: a retry
// gets 503 outcome_unknown, and the handler does not run again.
func TestStatusReleaseAfterSentStepIsUnknown(t *testing.T) {
	for _, tc := range []struct {
		name string
		rt   func() http.RoundTripper
	}{
		{"Propagator", func() http.RoundTripper { return &idemclient.Propagator{Base: &idemclient.Transport{}} }},
		{"Retrying", func() http.RoundTripper {
			r, err := idemclient.NewRetrying(&idemclient.Transport{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs, keyed atomic.Int32
			var sent atomic.Bool
			s, _ := memstore.New(nil)
			down := downstream(t, &keyed)
			srv := serve(t, newMiddleware(t, newEngine(t, s, nil), nil)(stepThen403(t, tc.rt(), down.URL+"/charge", false, &runs, &sent)))
			if r := (call{key: "k1"}).send(t, srv); r.status != http.StatusForbidden {
				t.Fatalf("first call %d, want 403", r.status)
			}
			if !sent.Load() || keyed.Load() != 1 {
				t.Fatalf("the step was answered %v, reached the downstream with a key %d times; want once", sent.Load(), keyed.Load())
			}
			r := (call{key: "k1"}).send(t, srv)
			checkProblem(t, r, http.StatusServiceUnavailable, idemhttp.CodeOutcomeUnknown)
			if !strings.Contains(string(r.body), "status 403 after a downstream step was sent") {
				t.Errorf("retry's detail %s; want the reason", r.body)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times; want 1", n)
			}
		})
	}
}

// A step that provably never left (its dial refused, which Transport
// sees) had no effect: the 403 releases the key as before, and a retry
// runs the handler again.
func TestStatusReleaseAfterUnsentStepReleases(t *testing.T) {
	var runs atomic.Int32
	var sent atomic.Bool
	s, _ := memstore.New(nil)
	rt := &idemclient.Propagator{Base: &idemclient.Transport{}}
	srv := serve(t, newMiddleware(t, newEngine(t, s, nil), nil)(stepThen403(t, rt, closedPort(t), false, &runs, &sent)))
	for i := range 2 {
		if r := (call{key: "k1"}).send(t, srv); r.status != http.StatusForbidden {
			t.Fatalf("call %d: %d, want 403 (body %s)", i, r.status, r.body)
		}
	}
	if sent.Load() {
		t.Fatal("the step to a closed port was answered")
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times; want 2 (released)", n)
	}
}

// SetDisposition(DispositionRelease) is the handler's word, which vouches
// that its steps had no effect: it releases the key after a sent step too.
func TestDeclaredReleaseAfterSentStepReleases(t *testing.T) {
	var runs, keyed atomic.Int32
	var sent atomic.Bool
	s, _ := memstore.New(nil)
	down := downstream(t, &keyed)
	rt := &idemclient.Propagator{Base: &idemclient.Transport{}}
	srv := serve(t, newMiddleware(t, newEngine(t, s, nil), nil)(stepThen403(t, rt, down.URL+"/charge", true, &runs, &sent)))
	for i := range 2 {
		if r := (call{key: "k1"}).send(t, srv); r.status != http.StatusForbidden {
			t.Fatalf("call %d: %d, want 403 (body %s)", i, r.status, r.body)
		}
	}
	if n := runs.Load(); n != 2 || keyed.Load() != 2 {
		t.Fatalf("handler ran %d times, the downstream got %d keyed requests; want 2 and 2 (released)", n, keyed.Load())
	}
}

// A request that carries no derived key is no step: a GET without a step
// passes through Propagator unchanged (as the gateway's forward goes
// through Transport without one), and the 403 releases the key.
func TestStatusReleaseAfterKeylessRequestReleases(t *testing.T) {
	var runs, keyed atomic.Int32
	s, _ := memstore.New(nil)
	down := downstream(t, &keyed)
	client := &http.Client{Transport: &idemclient.Propagator{Base: &idemclient.Transport{}}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, down.URL+"/lookup", nil)
		if res, err := client.Do(req); err == nil {
			res.Body.Close()
		}
		w.WriteHeader(http.StatusForbidden)
	})
	srv := serve(t, newMiddleware(t, newEngine(t, s, nil), nil)(h))
	for i := range 2 {
		if r := (call{key: "k1"}).send(t, srv); r.status != http.StatusForbidden {
			t.Fatalf("call %d: %d, want 403", i, r.status)
		}
	}
	if n := runs.Load(); n != 2 || keyed.Load() != 0 {
		t.Fatalf("handler ran %d times, %d keyed requests downstream; want 2 and 0", n, keyed.Load())
	}
}
