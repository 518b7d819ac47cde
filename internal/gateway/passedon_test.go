package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// An upstream protected by idem answers 409 key_in_flight (429 in the
// stripe format) because the key is running there (an earlier attempt,
// or a client that went around the gateway): the gateway passes it on and
// leaves the key UNKNOWN, neither stored as final for the retention nor
// released to be forwarded again. A route's statuses do not change it.
func TestUpstreamKeyInFlightIsUnknown(t *testing.T) {
	for storeName, newStore := range testenv.Stores() {
		for _, tc := range []struct {
			name   string
			format idemhttp.ErrorFormat
			status int
			routes []Route
		}{
			{name: "problem", format: idemhttp.ErrorFormatProblem, status: 409},
			{name: "stripe", format: idemhttp.ErrorFormatStripe, status: 429},
			{name: "route stores 409", format: idemhttp.ErrorFormatProblem, status: 409, routes: []Route{{Pattern: "POST /pay", Statuses: StatusOverrides{Store: []string{"409"}}}}},
		} {
			t.Run(storeName+"/"+tc.name, func(t *testing.T) {
				s, err := memstore.New(nil)
				if err != nil {
					t.Fatal(err)
				}
				downEngine, err := idem.New(s, nil)
				if err != nil {
					t.Fatal(err)
				}
				mw, err := idemhttp.New(downEngine, &idemhttp.Options{AllowAnonymous: true, ErrorFormat: tc.format})
				if err != nil {
					t.Fatal(err)
				}
				started, finish := make(chan struct{}), make(chan struct{})
				var forwarded atomic.Int64
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.Header.Get(FenceHeader) != "" {
						forwarded.Add(1)
					}
					mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						close(started) // the upstream's side effect is under way
						<-finish
					})).ServeHTTP(w, r)
				}))
				defer up.Close()
				key := testenv.Prefix(t) + "k"
				send := func(base string) *http.Response {
					req, err := http.NewRequest("POST", base+"/pay", strings.NewReader("{}"))
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set(idemhttp.HeaderKey, key)
					res, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					return res
				}
				first := make(chan struct{})
				go func() {
					defer close(first)
					send(up.URL) // straight to the upstream
				}()
				defer func() {
					close(finish)
					<-first
				}()
				<-started

				g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), Store: newStore(t), AllowAnonymous: true, ErrorFormat: tc.format, Routes: tc.routes})
				srv := httptest.NewServer(g.Handler())
				defer srv.Close()
				if res := send(srv.URL); res.StatusCode != tc.status {
					t.Fatalf("through the gateway: %d; want the upstream's %d passed on", res.StatusCode, tc.status)
				}
				rec, err := g.Engine().Get(context.Background(), store.ID{Key: key})
				if err != nil || rec.State != store.StateUnknown || !strings.Contains(rec.Reason, "downstream key was in flight") {
					t.Fatalf("the gateway's record: %v %q, %v; want UNKNOWN, a downstream key in flight", rec.State, rec.Reason, err)
				}
				if res := send(srv.URL); res.StatusCode != http.StatusServiceUnavailable {
					t.Fatalf("the retry through the gateway: %d; want 503 outcome_unknown", res.StatusCode)
				}
				if n := forwarded.Load(); n != 1 {
					t.Fatalf("the gateway forwarded the key %d times; want once", n)
				}
			})
		}
	}
}
