package probe_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/internal/probe"
	"github.com/idemkit/idem/store/memstore"
)

// The gateway passes the checks of issue 14 in both error formats: a form
// sent in another order replays, a replay carries the upstream's
// Request-Id and the key, and a 409's Retry-After is near the 300ms the
// upstream takes, not the 30s lease.
func TestGatewayPassesClientChecks(t *testing.T) {
	for _, format := range []idemhttp.ErrorFormat{idemhttp.ErrorFormatProblem, idemhttp.ErrorFormatStripe} {
		t.Run(format.String(), func(t *testing.T) {
			var n atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				i := n.Add(1)
				time.Sleep(300 * time.Millisecond) // the work the 409s wait for
				w.Header().Set("Request-Id", fmt.Sprintf("req_%d", i))
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"id":"ch_%d"}`, i)
			}))
			defer up.Close()
			store, _ := memstore.New(nil)
			u, _ := url.Parse(up.URL)
			g, err := gateway.New(gateway.Config{Upstream: u, Store: store, RequireKey: true, ErrorFormat: format, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(g.Handler())
			defer srv.Close()
			rep, err := probe.Run(context.Background(), probe.Config{
				URL: srv.URL + "/v1/charges", Body: []byte("amount=100&currency=usd&metadata[order]=7"),
				Header:      http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Authorization": {"Bearer sk_probe"}},
				Credentials: [2]string{"Bearer sk_a", "Bearer sk_b"},
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range rep.Findings {
				if f.Verdict != probe.Pass {
					t.Errorf("%s %s: %s", f.Verdict, f.Check, f.Observed)
				}
			}
			for _, c := range []string{probe.CheckReplayHeaders, probe.CheckRetryAfter, probe.CheckFormOrder} {
				f, ok := rep.Finding(c)
				if !ok {
					t.Errorf("no %s finding", c)
				}
				t.Logf("%s %s: %s", f.Verdict, c, f.Observed)
			}
		})
	}
}
