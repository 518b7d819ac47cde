package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
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

// An audit: Laravel fills a JSON request's input from its body, and
// Symfony's getMethod (with the method parameter override Laravel turns
// on) reads _method there, so a POST with Content-Type: application/json
// and {"_method":"PATCH"} reaches the PATCH endpoint. The gateway read
// _method only from a form body: with the config above, such a keyed POST
// ran twice (201, 201) where the same override in a form body got 400
// ambiguous_request. A top-level string member _method of a JSON object
// body is now read as the form field is, with the same answer; a body
// that is not a JSON object, or a _method that is not a top-level string,
// carries no override.
func TestJSONMethodOverrideMeetsItsRoute(t *testing.T) {
	for storeName, newStore := range testenv.Stores() {
		t.Run(storeName, func(t *testing.T) {
			up := newRouteUpstream(t)
			g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), Store: newStore(t), AllowAnonymous: true, Methods: []string{"PATCH"}, MaxBody: 1024, Routes: []Route{
				{Pattern: "PATCH /v1/orders/{id}", RequireKey: ptr(true)},
				{Pattern: "/v1/items/{id}", Methods: []string{"POST", "PUT"}},
			}})
			srv := httptest.NewServer(g.Handler())
			defer srv.Close()
			c := &routeClient{t: t, up: up, g: g, srv: srv, key: testenv.Prefix(t)}
			form := c.send("POST", "/v1/orders/7", "f", "_method=PATCH&amount=1", "Content-Type", "application/x-www-form-urlencoded")
			if form.status != http.StatusBadRequest || form.code != CodeAmbiguousRequest {
				t.Fatalf("the form field: %d %s; want 400 %s", form.status, form.body, CodeAmbiguousRequest)
			}
			for i, o := range []struct{ ct, body string }{
				{"application/json", `{"_method":"PATCH","amount":1}`},
				{"application/json; charset=utf-8", ` {"amount":1, "_method" : "patch"} `},
				{"application/merge-patch+json", `{"amount":{"_method":"GET"},"_METHOD":"PATCH, POST"}`},
				{"application/json", `{"\u005fmethod":"\u0050ATCH"}`},
				{"application/json", `{"_method":"GET","_method":"PATCH"}`},
				{"text/json", `{"_method":"PATCH"}`},          // Laravel's isJson: a type containing /json
				{"Application/JSON;x", `{"_method":"PATCH"}`}, // or +json, in any case, a parameter it cannot parse too
			} {
				key := fmt.Sprintf("j%d", i)
				for range 2 {
					if got := c.send("POST", "/v1/orders/7", key, o.body, "Content-Type", o.ct); got.status != form.status || got.code != form.code {
						t.Errorf("POST %s %s = %d %s; want %d %s, as the form field gets", o.ct, o.body, got.status, got.body, form.status, form.code)
					}
				}
				if n := c.runs(key); n != 0 {
					t.Errorf("POST %s %s ran %d times; want never", o.ct, o.body, n)
				}
			}
			// No override reading: the request as written, forwarded whole.
			for i, o := range []struct{ ct, body string }{
				{"application/json", `{"amount":1,"order":{"_method":"PATCH"}}`},
				{"application/json", `{"_method":["PATCH"],"x":{"_method":1}}`},
				{"application/json", `[{"_method":"PATCH"}]`},
				{"application/json", `"_method"`},
				{"application/json", `{"_method":"PATCH"`},
				{"application/json", `{"_method":"GET"}`},
				{"text/plain", `{"_method":"PATCH"}`},
			} {
				key := fmt.Sprintf("n%d", i)
				for range 2 { // a POST, unprotected there: forwarded each time
					c.want("POST "+o.ct+" "+o.body, c.send("POST", "/v1/orders/7", key, o.body, "Content-Type", o.ct), http.StatusCreated, false)
				}
				c.up.mu.Lock()
				forwarded := slices.Contains(c.up.bodies, o.body)
				c.up.mu.Unlock()
				if !forwarded {
					t.Errorf("the body %s read for _method did not reach the upstream whole", o.body)
				}
			}
			// An override the same route protects: the same protection.
			for i := range 2 {
				c.want("POST /v1/items/1 with a JSON _method PUT", c.send("POST", "/v1/items/1", "i", `{"_method":"PUT"}`), http.StatusCreated, i == 1)
			}
			// A JSON body over max-body, read for _method, as a form body.
			big := `{"_method":"PATCH","pad":"` + strings.Repeat("x", 2048) + `"}`
			for _, ct := range []string{"application/json", "application/x-www-form-urlencoded"} {
				if got := c.send("POST", "/v1/orders/7", "b", big, "Content-Type", ct); got.status != http.StatusRequestEntityTooLarge {
					t.Errorf("POST %s over max-body = %d %s; want 413", ct, got.status, got.body)
				}
			}
			if c.runs("b") != 0 || c.runs("i") != 1 {
				t.Fatalf("runs: over max-body %d, items %d; want 0 and 1", c.runs("b"), c.runs("i"))
			}
		})
	}
}
