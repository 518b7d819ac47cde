package gateway

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// An audit: Rails, Spring, ASP.NET and Express turn a POST with
// X-HTTP-Method-Override: PATCH (or X-HTTP-Method, X-Method-Override, a
// _method query parameter or form field) into a PATCH, but the gateway
// matched it as a POST: with PATCH /v1/orders/{id} requiring a key under
// top-level methods [PATCH], a keyed POST /v1/orders/7 overridden to
// PATCH ran twice. Now a request whose override reading is protected
// otherwise than its own is refused 400 ambiguous_request before a key is
// taken; one whose override reading is the same protection, or none,
// passes.
func TestMethodOverrideMeetsItsRoute(t *testing.T) {
	for storeName, newStore := range testenv.Stores() {
		t.Run(storeName, func(t *testing.T) {
			up := newRouteUpstream(t)
			g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), Store: newStore(t), AllowAnonymous: true, Methods: []string{"PATCH"}, Routes: []Route{
				{Pattern: "PATCH /v1/orders/{id}", RequireKey: ptr(true)},
				{Pattern: "/v1/items/{id}", Methods: []string{"POST", "PUT"}},
			}})
			srv := httptest.NewServer(g.Handler())
			defer srv.Close()
			c := &routeClient{t: t, up: up, g: g, srv: srv, key: testenv.Prefix(t)}
			form, multi := "application/x-www-form-urlencoded", "multipart/form-data; boundary=b"
			for _, o := range []struct {
				path, body string
				hdr        []string
			}{
				{"/v1/orders/7", "{}", []string{"X-HTTP-Method-Override", "PATCH"}},
				{"/v1/orders/7", "{}", []string{"X-HTTP-Method", "patch"}},
				{"/v1/orders/7", "{}", []string{"X-Method-Override", "PATCH, POST"}},
				{"/v1/orders/7?_method=PATCH", "{}", nil},
				{"/v1/orders/7?a=1;%5Fmethod=patch", "{}", nil},
				{"/v1/orders/7", "a=1&_method=PATCH", []string{"Content-Type", form}},
				{"/v1/orders/7", "--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nPATCH\r\n--b--\r\n", []string{"Content-Type", multi}},
			} {
				for range 2 {
					if got := c.send("POST", o.path, "o", o.body, o.hdr...); got.status != http.StatusBadRequest || got.code != CodeAmbiguousRequest {
						t.Errorf("POST %s %q overridden by %q = %d %s; want 400 %s", o.path, o.body, o.hdr, got.status, got.body, CodeAmbiguousRequest)
					}
				}
			}
			if n := c.runs("o"); n != 0 {
				t.Fatalf("overridden POSTs ran %d times; want never", n)
			}
			for i := range 2 {
				c.want("the PATCH itself", c.send("PATCH", "/v1/orders/7", "p", "{}"), http.StatusCreated, i == 1)
			}
			// The same route protects PUT and POST: the same protection.
			for i := range 2 {
				c.want("POST /v1/items/1 overridden to PUT", c.send("POST", "/v1/items/1", "i", "{}", "X-HTTP-Method-Override", "PUT"), http.StatusCreated, i == 1)
			}
			// An override reading nothing protects: the request as written.
			c.want("POST /v1/orders/7 overridden to GET", c.send("POST", "/v1/orders/7", "", "{}", "X-HTTP-Method-Override", "GET"), http.StatusCreated, false)
			c.want("a form POST without an override", c.send("POST", "/v1/orders/7", "", "a=1&method=x", "Content-Type", form), http.StatusCreated, false)
			c.up.mu.Lock()
			forwarded := slices.Contains(c.up.bodies, "a=1&method=x")
			c.up.mu.Unlock()
			if !forwarded {
				t.Errorf("the form body read for _method did not reach the upstream whole")
			}
			if c.runs("p") != 1 || c.runs("i") != 1 {
				t.Fatalf("runs: PATCH %d, items %d; want once each", c.runs("p"), c.runs("i"))
			}
		})
	}
	// Without routes, the top level's protection is the override reading's.
	up := newRouteUpstream(t)
	g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), AllowAnonymous: true, Methods: []string{"PATCH"}})
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	c := &routeClient{t: t, up: up, g: g, srv: srv, key: "override-"}
	if got := c.send("POST", "/v1/orders/7", "o", "{}", "X-HTTP-Method-Override", "PATCH"); got.status != http.StatusBadRequest || got.code != CodeAmbiguousRequest {
		t.Errorf("without routes, POST overridden to PATCH = %d %s; want 400 %s", got.status, got.body, CodeAmbiguousRequest)
	}
	c.want("without routes, a POST", c.send("POST", "/v1/orders/7", "q", "{}"), http.StatusCreated, false)
}
