package idemclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemclient"
)

// TestCallerKeyUnderAnyHeaderCase: a key the caller set under a header
// name that is not in canonical form (req.Header["idempotency-key"], as a
// header map copied from HTTP/2 or gRPC metadata holds it, and as
// Transport writes it) is the caller's key: Propagator and Retrying send
// it as it is, and add no second key of their own, on every attempt.
func TestCallerKeyUnderAnyHeaderCase(t *testing.T) {
	var mu sync.Mutex
	var got [][]string
	first := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, slices.Clone(r.Header.Values(idemclient.HeaderKey)))
		retry := first
		first = false
		mu.Unlock()
		if retry {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	s := &sleeper{}
	rt, err := idemclient.NewRetrying(transport(t), &idemclient.RetryOptions{Sleep: s.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*http.Client{
		"Retrying":            {Transport: rt},
		"Propagator":          {Transport: &idemclient.Propagator{Base: transport(t)}},
		"Propagator/Retrying": {Transport: &idemclient.Propagator{Base: rt}},
	} {
		t.Run(name, func(t *testing.T) {
			mu.Lock()
			got, first = nil, true
			mu.Unlock()
			ctx := idemclient.WithStep(idemclient.WithScope(context.Background(), "acme", "order-42"), "charge")
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
			req.Header["idempotency-key"] = []string{"caller-key"}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if len(got) == 0 {
				t.Fatal("nothing sent")
			}
			for i, keys := range got {
				if len(keys) != 1 || keys[0] != "caller-key" {
					t.Errorf("attempt %d sent the keys %q, want only the caller's", i+1, keys)
				}
			}
		})
	}
}
