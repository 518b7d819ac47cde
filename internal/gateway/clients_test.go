package gateway

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// With ErrorFormat stripe the gateway's own errors are Stripe's error
// object too; a replay carries the upstream's Request-Id and the key by
// default; a forbidden replay header is a configuration error.
func TestGatewayStripeFormatAndReplayHeaders(t *testing.T) {
	n := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		w.Header().Set("Request-Id", "req_"+strings.Repeat("x", n))
		w.Header().Set("Stripe-Version", "2025-03-31")
		w.Header().Set("Set-Cookie", "session=1")
		w.WriteHeader(http.StatusOK)
	}))
	defer up.Close()
	store, _ := memstore.New(nil)
	u, _ := url.Parse(up.URL)
	// A new connection per request: after up.Close a pooled connection the
	// transport has not yet seen closed would take the request, and a
	// failure after writing it is (rightly) an unknown outcome, not the
	// unreachable upstream this test wants.
	transport := NewUpstreamTransport()
	transport.DisableKeepAlives = true
	cfg := Config{Upstream: u, Store: store, Logger: slog.New(slog.DiscardHandler), ErrorFormat: idemhttp.ErrorFormatStripe, Transport: transport}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	send := func(key, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer sk_test_1")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	send("k1", "amount=1&currency=usd").Body.Close()
	r := send("k1", "currency=usd&amount=1")
	r.Body.Close()
	if r.StatusCode != 200 || r.Header.Get("Request-Id") != "req_x" || r.Header.Get("Idempotency-Key") != "k1" ||
		r.Header.Get("Stripe-Version") != "2025-03-31" || r.Header.Get("Idempotent-Replayed") != "true" || r.Header.Get("Set-Cookie") != "" {
		t.Errorf("replay %d %v: want 200 with the original Request-Id req_x, the key, Stripe-Version, no Set-Cookie", r.StatusCode, r.Header)
	}
	r = send("k1", "currency=usd&amount=2")
	var e idemhttp.StripeError
	json.NewDecoder(r.Body).Decode(&e)
	r.Body.Close()
	if r.StatusCode != 400 || e.Error.Type != "idempotency_error" || e.Error.Code != "key_mismatch" || r.Header.Get("Stripe-Should-Retry") != "false" {
		t.Errorf("mismatch %d %+v", r.StatusCode, e)
	}

	up.Close() // the upstream is gone: upstream_unreachable, in stripe's shape
	r = send("k2", "amount=1")
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	e = idemhttp.StripeError{}
	json.Unmarshal(body, &e)
	if r.StatusCode != 502 || e.Error.Type != "api_error" || e.Error.Code != CodeUpstreamUnreachable {
		t.Errorf("unreachable upstream: %d %s", r.StatusCode, body)
	}

	for _, bad := range []string{"Set-Cookie", "Authorization", "Connection"} {
		cfg.ReplayHeaders = []string{"Request-Id", bad}
		if _, err := New(cfg); err == nil {
			t.Errorf("ReplayHeaders with %s accepted", bad)
		}
	}
}
