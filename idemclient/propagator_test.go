package idemclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
)

// recorder is a loopback server that records the Idempotency-Key of every
// request it receives and answers with status (200 when zero).
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	keys []string
}

func newRecorder(t *testing.T, h http.HandlerFunc) *recorder {
	t.Helper()
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.keys = append(r.keys, req.Header.Get(idemclient.HeaderKey))
		r.mu.Unlock()
		if h != nil {
			h(w, req)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keys...)
}

// transport returns a loopback transport without keep-alives, so that no
// connection outlives the test and the standard transport never retries on
// its own.
func transport(t *testing.T) *http.Transport {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func TestStepKeyIsStableAndInjective(t *testing.T) {
	// A change to this value changes every key sent downstream: a deploy
	// would then re-execute requests that were retried across it. The value
	// was checked independently: Python hashlib over the same encoding.
	const golden = "sYHyAftpp6ZOFpqK4_xaHM5FM76rX5-obULjmzHkz4E"
	if got := idemclient.StepKey("acme", "order-42", "charge"); got != golden {
		t.Errorf("StepKey(acme, order-42, charge) = %q; want %q", got, golden)
	}
	triples := [][3]string{
		{"acme", "order-42", "charge"},
		{"acme", "order-42", "refund"},
		{"acme", "order-43", "charge"},
		{"globex", "order-42", "charge"},
		{"a", "bc", "d"}, // the splits that a plain concatenation confuses
		{"ab", "c", "d"},
		{"a", "b", "cd"},
		{"", "abc", "d"},
		{"a\x00b", "c", "d"},
		{"a", "\x00bc", "d"},
	}
	seen := map[string][3]string{}
	for _, tr := range triples {
		k := idemclient.StepKey(tr[0], tr[1], tr[2])
		if k2 := idemclient.StepKey(tr[0], tr[1], tr[2]); k2 != k {
			t.Fatalf("StepKey%q not stable: %q then %q", tr, k, k2)
		}
		if err := idem.ValidateKey(k); err != nil || len(k) != 43 {
			t.Errorf("StepKey%q = %q (%d bytes): %v; want a valid 43-byte key", tr, k, len(k), err)
		}
		if other, dup := seen[k]; dup {
			t.Errorf("StepKey%q == StepKey%q", tr, other)
		}
		seen[k] = tr
	}
}

func TestPropagatorAddsDerivedKey(t *testing.T) {
	srv := newRecorder(t, nil)
	client := &http.Client{Transport: &idemclient.Propagator{Base: transport(t)}}
	ctx := idemclient.WithStep(idemclient.WithScope(context.Background(), "acme", "order-42"), "charge")

	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("amount=100"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if req.Header.Get(idemclient.HeaderKey) != "" {
		t.Error("Propagator modified the caller's request header")
	}
	want := idemclient.StepKey("acme", "order-42", "charge")
	if got := srv.seen(); len(got) != 1 || got[0] != want {
		t.Fatalf("provider saw keys %q; want [%q]", got, want)
	}
}

func TestPropagatorRefusesToSendWithoutKey(t *testing.T) {
	srv := newRecorder(t, nil)
	client := &http.Client{Transport: &idemclient.Propagator{Base: transport(t)}}
	scoped := idemclient.WithScope(context.Background(), "acme", "order-42")
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		method string
		want   error
	}{
		{"POST without step", scoped, http.MethodPost, idemclient.ErrNoStep},
		{"PATCH without step", scoped, http.MethodPatch, idemclient.ErrNoStep},
		{"POST with empty step", idemclient.WithStep(scoped, ""), http.MethodPost, idemclient.ErrNoStep},
		{"POST without scope", idemclient.WithStep(context.Background(), "charge"), http.MethodPost, idemclient.ErrNoScope},
		{"GET with step without scope", idemclient.WithStep(context.Background(), "charge"), http.MethodGet, idemclient.ErrNoScope},
		{"POST with empty inbound key", idemclient.WithStep(idemclient.WithScope(context.Background(), "acme", ""), "charge"), http.MethodPost, idem.ErrInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(tc.ctx, tc.method, srv.URL, strings.NewReader("x"))
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v; want %v", err, tc.want)
			}
		})
	}
	if got := srv.seen(); len(got) != 0 {
		t.Fatalf("provider saw %d requests; want none sent without a key", len(got))
	}
}

func TestPropagatorKeepsCallerKeyAndPassesOthers(t *testing.T) {
	srv := newRecorder(t, nil)
	client := &http.Client{Transport: &idemclient.Propagator{Base: transport(t)}}
	scoped := idemclient.WithScope(context.Background(), "acme", "order-42")
	send := func(ctx context.Context, method, key string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL, nil)
		if key != "" {
			req.Header.Set(idemclient.HeaderKey, key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	send(idemclient.WithStep(scoped, "charge"), http.MethodPost, "caller-key") // explicit key wins
	send(context.Background(), http.MethodPost, "caller-key-2")                // no scope needed then
	send(scoped, http.MethodGet, "")                                           // GET without step: untouched
	send(idemclient.WithStep(scoped, "cancel"), http.MethodDelete, "")         // a step opts any method in
	want := []string{"caller-key", "caller-key-2", "", idemclient.StepKey("acme", "order-42", "cancel")}
	if got := srv.seen(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("provider saw keys %q; want %q", got, want)
	}
}

func TestReplayed(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "True": true, " true ": true, "false": false, "": false, "1": false} {
		resp := &http.Response{Header: http.Header{}}
		if v != "" {
			resp.Header.Set(idemclient.HeaderReplayed, v)
		}
		if got := idemclient.Replayed(resp); got != want {
			t.Errorf("Replayed(%q) = %v; want %v", v, got, want)
		}
	}
	if idemclient.Replayed(nil) {
		t.Error("Replayed(nil) = true")
	}
}

func TestScopeFrom(t *testing.T) {
	if _, _, ok := idemclient.ScopeFrom(context.Background()); ok {
		t.Error("ScopeFrom(Background) ok")
	}
	tenant, key, ok := idemclient.ScopeFrom(idemclient.WithScope(context.Background(), "acme", "k"))
	if !ok || tenant != "acme" || key != "k" {
		t.Errorf("ScopeFrom = %q, %q, %v", tenant, key, ok)
	}
}
