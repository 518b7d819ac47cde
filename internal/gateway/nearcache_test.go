package gateway

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// TestNearCacheOnMetrics: with ?near_cache=on the gateway replays from the
// near cache and /metrics counts its hits.
func TestNearCacheOnMetrics(t *testing.T) {
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "done")
	}))
	defer up.Close()
	g, srv := redisGateway(t, "near_cache=on", up.URL)
	key := "near-" + rand.Text()
	for i := range 4 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/x", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer near")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || string(body) != "done" {
			t.Fatalf("request %d = %d %q; want 201 done", i, resp.StatusCode, body)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("upstream called %d times; want once", n)
	}
	rec := httptest.NewRecorder()
	g.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	// 4 requests: executed (the store saw it complete), then a miss (the
	// cached read that fills the cache, in place of the script), two hits.
	for _, want := range []string{`idem_near_cache_total{event="hit"} 2`, `idem_near_cache_total{event="miss"} 1`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grepLines(rec.Body.String(), "near_cache"))
		}
	}
}

// redisGateway serves a gateway on the test Redis, its store URI given
// option (a query parameter), in front of upstream, until the test ends.
func redisGateway(t testing.TB, option, upstream string) (*Gateway, *httptest.Server) {
	t.Helper()
	store, closeStore, err := OpenStore(context.Background(), withQuery(testenv.RedisURL(), option), nil)
	if err != nil {
		testenv.Unavailable(t, "Redis at "+testenv.RedisURL(), err)
	}
	t.Cleanup(func() { closeStore() })
	u, _ := url.Parse(upstream)
	g, err := New(Config{Upstream: u, Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	return g, srv
}

func grepLines(s, sub string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestCoalesceOnMetrics: with ?coalesce=on the gateway's store coalesces
// its scripts and /metrics exports what it did: one request at a time,
// every operation goes out alone.
func TestCoalesceOnMetrics(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "done")
	}))
	defer up.Close()
	g, srv := redisGateway(t, "coalesce=on", up.URL)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/x", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "coalesce-"+rand.Text())
	req.Header.Set("Authorization", "Bearer coalesce")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("request = %d; want 201", resp.StatusCode)
	}
	rec := httptest.NewRecorder()
	g.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	// The acquire and the complete, each alone; and the scrape's own
	// readiness read (idem_ready) when the registry, which collects
	// concurrently, ran it before it read this counter.
	body := rec.Body.String()
	alone2 := strings.Contains(body, `idem_coalesce_operations_total{sent="alone"} 2`)
	alone3 := strings.Contains(body, `idem_coalesce_operations_total{sent="alone"} 3`)
	if !(alone2 || alone3) || !strings.Contains(body, `idem_coalesce_batches_total 0`) {
		t.Errorf("/metrics: want 2 operations alone (3 with the readiness read) and no batch:\n%s", grepLines(body, "coalesce"))
	}
}
