package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// scrape returns the samples of the gateway's /metrics by series, as
// written (name{labels}).
func scrape(t *testing.T, g *Gateway) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	g.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics = %d %s", rec.Code, rec.Body)
	}
	samples := map[string]float64{}
	for _, m := range regexp.MustCompile(`(?m)^(\w+(?:\{[^}]*\})?) (\S+)$`).FindAllStringSubmatch(rec.Body.String(), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", m[0], err)
		}
		samples[m[1]] = v
	}
	return samples
}

// memoryGateway is a gateway on s (the memory store, or one wrapping it).
func memoryGateway(t *testing.T, s store.Store) *Gateway {
	t.Helper()
	u, _ := url.Parse("http://127.0.0.1:1")
	g, err := New(Config{Upstream: u, Store: s, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The series an alert watches exist, at 0, before their first event: a
// counter born at its first increment has no earlier sample, so rate()
// and increase() would miss that increment.
func TestAlertedSeriesStartAtZero(t *testing.T) {
	store, _ := memstore.New(nil)
	samples := scrape(t, memoryGateway(t, store))
	for _, series := range []string{
		`idem_requests_total{outcome="store_error",route=""}`, `idem_requests_total{outcome="store_full",route=""}`,
		`idem_requests_total{outcome="executed",route=""}`, `idem_requests_total{outcome="unknown",route=""}`,
		`idem_reconcile_contract_errors_total{missing="fence"}`, `idem_reconcile_contract_errors_total{missing="tenant"}`,
		`idem_lease_events_total{event="lost"}`, `idem_lease_events_total{event="expired"}`,
		`idem_reconciliations_total{result="error"}`, `idem_reconciliations_total{result="not_executed"}`,
		`idem_unknown_keys`, `idem_unknown_oldest_seconds`, `idem_memory_store_bytes`,
	} {
		if v, ok := samples[series]; !ok || v != 0 {
			t.Errorf("%s = %v (present: %v); want 0", series, v, ok)
		}
	}
	if v := samples["idem_memory_store_limit_bytes"]; v != 256<<20 {
		t.Errorf("idem_memory_store_limit_bytes = %v; want the default bound, %d", v, 256<<20)
	}
}

// idem_unknown_oldest_seconds is the age of the oldest UNKNOWN key, from
// when it was marked, and idem_memory_store_bytes counts its record.
func TestUnknownOldestAndMemoryUsage(t *testing.T) {
	ctx := context.Background()
	// The store's clock runs late, by what lag says when a key is marked:
	// the first key was marked two hours ago, the second one hour ago.
	var lag atomic.Int64
	st, err := memstore.New(&memstore.Options{MaxBytes: 1 << 20, Clock: func() time.Time { return time.Now().Add(-time.Duration(lag.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key string
		lag time.Duration
	}{{"older", 2 * time.Hour}, {"old", time.Hour}} {
		lag.Store(int64(c.lag))
		res, err := st.Acquire(ctx, store.AcquireParams{ID: store.ID{Tenant: "t", Key: c.key}, Owner: c.key, LeaseDuration: time.Minute, Retention: 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		err = st.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: store.LeaseRef{ID: res.Record.ID, Owner: c.key, Fence: res.Record.Fence},
			Reason: "test", Retention: 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
	}
	samples := scrape(t, memoryGateway(t, st))
	if v := samples["idem_unknown_keys"]; v != 2 {
		t.Errorf("idem_unknown_keys = %v; want 2", v)
	}
	if v := samples["idem_unknown_oldest_seconds"]; v < 7200 || v > 7260 {
		t.Errorf("idem_unknown_oldest_seconds = %v; want two hours (the oldest key)", v)
	}
	used, limit := st.Usage()
	if v := samples["idem_memory_store_bytes"]; v != float64(used) || used == 0 {
		t.Errorf("idem_memory_store_bytes = %v; want the store's Usage, %d", v, used)
	}
	if v := samples["idem_memory_store_limit_bytes"]; v != float64(limit) || limit != 1<<20 {
		t.Errorf("idem_memory_store_limit_bytes = %v; want %d", v, 1<<20)
	}
}
