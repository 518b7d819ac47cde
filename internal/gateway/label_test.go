package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
)

// Issue 36, item 4: an UNKNOWN key says what its request was, to the
// admin API (and so the console): its method, path and route, never its
// query or a header's value, and when it was sent. A path too long for
// the label is cut and the route kept.
func TestUnknownKeyCarriesItsRequestLabel(t *testing.T) {
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack() // the request may have run: no answer
		if err == nil {
			c.Close()
		}
	}))
	defer cut.Close()
	u, _ := url.Parse(cut.URL)
	g := adminGateway(t, Config{Upstream: u, Routes: []Route{{Pattern: "/v1/orders/{id}", Name: "orders"}, {Pattern: "/v1/refunds/"}}})
	long := "/v1/refunds/" + strings.Repeat("r", 300)
	for _, c := range []struct{ key, target, want string }{
		{"k-order", "/v1/orders/42?card=4242424242424242", "POST /v1/orders/42 route=orders"},
		{"k-other", "/v2/charges?secret=s", "POST /v2/charges"},
		{"k-long", long, "POST " + long[:store.MaxLabelLength-len("POST  route=/v1/refunds/")] + " route=/v1/refunds/"},
	} {
		before := time.Now()
		req := httptest.NewRequest(http.MethodPost, c.target, strings.NewReader("{}"))
		req.Header.Set(idemhttp.HeaderKey, c.key)
		req.Header.Set("Authorization", "Bearer sk_live_secret")
		rec := httptest.NewRecorder()
		g.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusBadGateway {
			t.Fatalf("%s: a cut request = %d %s; want 502", c.target, rec.Code, rec.Body)
		}
		list, body := admin(t, g, "GET", "/v1/keys?state=unknown", "")
		if list != 200 {
			t.Fatalf("GET /v1/keys = %d %s", list, body)
		}
		var page struct{ Keys []RecordView }
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		var got *RecordView
		for i := range page.Keys {
			if page.Keys[i].Key == c.key {
				got = &page.Keys[i]
			}
		}
		if got == nil || got.State != "UNKNOWN" || got.Label != c.want || len(got.Label) > store.MaxLabelLength {
			t.Fatalf("%s: listed %+v; want UNKNOWN with label %q", c.target, got, c.want)
		}
		if got.AcquiredAt.Before(before.Add(-time.Second)) || got.AcquiredAt.After(time.Now()) {
			t.Fatalf("%s: acquired_at %v; want when it was sent (%v)", c.target, got.AcquiredAt, before)
		}
		if strings.Contains(body, "4242") || strings.Contains(body, "secret") {
			t.Fatalf("the admin API shows a query or a header: %s", body)
		}
	}
}
