package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// Issue 31, item 13: the latency buckets stopped at 1 s (store) and 10 s
// (upstream), below the 2 s store timeout and the 30 s upstream timeout:
// the calls that ran into them, the ones an operator looks for, were all
// in +Inf. They now reach past the store timeout and the longest upstream
// timeout, a route's included.
func TestLatencyBucketsReachPastTheTimeouts(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	defer up.Close()
	for _, c := range []struct {
		cfg                   Config
		storeTop, upstreamTop string // the first bucket past each timeout
		route                 string // the route label of the call
	}{
		{Config{}, "2.5", "50", ""},
		{Config{StoreTimeout: 7 * time.Second, UpstreamTimeout: 2 * time.Minute, Lease: 2 * time.Minute}, "10", "250", ""},
		{Config{Routes: []Route{{Pattern: "POST /v1/exports", Lease: ptr(5 * time.Minute), UpstreamTimeout: ptr(5 * time.Minute)}}}, "2.5", "500", "POST /v1/exports"},
	} {
		c.cfg.Upstream = mustURL(t, up.URL)
		g := newTestGateway(t, c.cfg)
		req := httptest.NewRequest(http.MethodPost, "/v1/exports", strings.NewReader("{}"))
		req.Header.Set(idemhttp.HeaderKey, "k")
		req.Header.Set("Authorization", "Bearer alice")
		g.Handler().ServeHTTP(httptest.NewRecorder(), req)
		samples := scrape(t, g)
		for _, series := range []string{
			fmt.Sprintf(`idem_store_seconds_bucket{op="acquire",result="ok",le="%s"}`, c.storeTop),
			fmt.Sprintf(`idem_upstream_seconds_bucket{route=%q,le="%s"}`, c.route, c.upstreamTop),
		} {
			if v, ok := samples[series]; !ok || v != 1 {
				t.Errorf("store timeout %v, upstream timeouts up to %v: %s = %v (present %v); want the bucket, with the one call",
					c.cfg.StoreTimeout, c.cfg.longestUpstreamTimeout(), series, v, ok)
			}
		}
	}
}
