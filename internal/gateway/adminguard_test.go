package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
)

// testAdmin is the admin address of the gateways whose admin API the
// tests call in process (newTestGateway's; nothing listens there).
const testAdmin = "127.0.0.1:9090"

// adminRequest is a call to the admin API as an operator's tool makes
// it: Host the admin address, and JSON for a change.
func adminRequest(method, path, body string) *http.Request {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Host = testAdmin
	if changes(method) {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// call sends req to g's admin API and returns the answer.
func call(g *Gateway, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	g.AdminHandler().ServeHTTP(rec, req)
	return rec
}

// Issue 31, item 5: the admin API (without a token, its default, and with
// one) answered any Host and any Origin: a page the operator visited, or a
// name DNS rebound to the admin address, listed UNKNOWN keys with their
// fences and resolved one not_executed with a text/plain POST, after which
// the next retry ran it again. Each such request is refused, nothing is
// read or changed, and the key stays UNKNOWN; an operator's own calls
// (the admin address, loopback on its port, JSON) still work.
func TestAdminRefusesRequestsFromElsewhere(t *testing.T) {
	for _, token := range []string{"", adminToken} {
		t.Run("token="+token, func(t *testing.T) {
			g := newTestGateway(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1"), AdminToken: token})
			id := store.ID{Tenant: "acme", Key: "k"}
			fence := unknownKey(t, g.Engine(), id)
			resolve := fmt.Sprintf(`{"fence":%d,"outcome":"not_executed"}`, fence)
			ask := func(method, path, body string, edit func(*http.Request)) *httptest.ResponseRecorder {
				req := adminRequest(method, path, body)
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				edit(req)
				return call(g, req)
			}
			host := func(h string) func(*http.Request) { return func(r *http.Request) { r.Host = h } }
			header := func(kv ...string) func(*http.Request) {
				return func(r *http.Request) {
					for i := 0; i < len(kv); i += 2 {
						r.Header.Add(kv[i], kv[i+1])
					}
				}
			}
			contentType := func(v string) func(*http.Request) {
				return func(r *http.Request) {
					if v == "" {
						r.Header.Del("Content-Type")
					} else {
						r.Header.Set("Content-Type", v)
					}
				}
			}
			calls := []struct{ method, path, body string }{
				{"GET", "/v1/keys?state=unknown", ""}, {"GET", "/v1/keys/acme/k", ""}, {"GET", "/v1/stats", ""},
				{"GET", "/v1/audit", ""}, {"POST", "/v1/keys/acme/k/resolve", resolve},
				{"POST", "/v1/keys/acme/k/reconcile", ""}, {"DELETE", "/v1/keys/acme/k?force=true", ""},
			}
			for _, refused := range []struct {
				name   string
				edit   func(*http.Request)
				status int
				code   string
			}{
				{"foreign Host", host("evil.example.com"), 403, CodeAdminHostRefused},
				{"foreign Host on the admin port", host("evil.example.com:9090"), 403, CodeAdminHostRefused},
				{"loopback on another port", host("localhost:8080"), 403, CodeAdminHostRefused},
				{"loopback without a port (80)", host("127.0.0.1"), 403, CodeAdminHostRefused},
				{"a loopback-looking name", host("localhost.evil.example.com:9090"), 403, CodeAdminHostRefused},
				{"no Host", host(""), 403, CodeAdminHostRefused},
				{"foreign Origin", header("Origin", "http://evil.example.com"), 403, CodeAdminOriginRefused},
				{"Origin of another local port", header("Origin", "http://localhost:3000"), 403, CodeAdminOriginRefused},
				{"Origin null", header("Origin", "null"), 403, CodeAdminOriginRefused},
				{"Origin with a path", header("Origin", "http://127.0.0.1:9090/x"), 403, CodeAdminOriginRefused},
				{"two Origins", header("Origin", "http://127.0.0.1:9090", "Origin", "http://evil.example.com"), 403, CodeAdminOriginRefused},
				{"Sec-Fetch-Site cross-site", header("Sec-Fetch-Site", "cross-site"), 403, CodeAdminOriginRefused},
				{"Sec-Fetch-Site same-site without Origin", header("Sec-Fetch-Site", "same-site"), 403, CodeAdminOriginRefused},
			} {
				for _, c := range calls {
					rec := ask(c.method, c.path, c.body, refused.edit)
					wantProblemIn(t, refused.name+": "+c.method+" "+c.path, rec, refused.status, refused.code)
					if strings.Contains(rec.Body.String(), `"fence"`) || strings.Contains(rec.Body.String(), `"keys"`) {
						t.Errorf("%s: %s %s answered data: %s", refused.name, c.method, c.path, rec.Body)
					}
				}
			}
			// What a form or a simple cross-origin fetch can send: refused
			// even from the admin address itself.
			for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx"} {
				for _, c := range calls[4:] {
					rec := ask(c.method, c.path, c.body, contentType(ct))
					wantProblemIn(t, "Content-Type "+ct+": "+c.method+" "+c.path, rec, 415, CodeAdminContentType)
				}
			}
			if rec, err := g.Engine().Get(context.Background(), id); err != nil || rec.State != store.StateUnknown || rec.Fence != fence {
				t.Fatalf("after the refused calls the key is %+v, %v; want it UNKNOWN with fence %d", rec, err, fence)
			}
			// Probes and scrapers name the address as they please: no key there.
			for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
				if rec := ask("GET", path, "", func(r *http.Request) { r.Host = "10.0.0.7:9090"; r.Header.Set("Origin", "http://evil.example.com") }); rec.Code != 200 {
					t.Errorf("GET %s by another name = %d %s; want 200", path, rec.Code, rec.Body)
				}
			}
			// The console's files: by an allowed Host only, but from a link anywhere.
			wantProblemIn(t, "GET /ui/ by a foreign Host", ask("GET", "/ui/", "", host("evil.example.com")), 403, CodeAdminHostRefused)
			if rec := ask("GET", "/ui/", "", header("Sec-Fetch-Site", "cross-site")); rec.Code != 200 {
				t.Errorf("GET /ui/ navigated to from another site = %d; want 200 (the files hold no data)", rec.Code)
			}
			// An operator's own calls.
			for _, allowed := range []func(*http.Request){
				host("127.0.0.1:9090"), host("localhost:9090"), host("LOCALHOST.:9090"), host("[::1]:9090"), host("127.0.0.2:9090"),
				header("Origin", "http://127.0.0.1:9090"), header("Origin", "http://localhost:9090", "Sec-Fetch-Site", "same-origin"),
				header("Sec-Fetch-Site", "none"), header("Sec-Fetch-Site", "same-site", "Origin", "http://[::1]:9090"),
			} {
				if rec := ask("GET", "/v1/keys/acme/k", "", allowed); rec.Code != 200 {
					t.Errorf("an operator's GET = %d %s; want 200", rec.Code, rec.Body)
				}
			}
			rec := ask("POST", "/v1/keys/acme/k/resolve", resolve, func(r *http.Request) {
				r.Host = "localhost:9090"
				r.Header.Set("Origin", "http://localhost:9090")
				r.Header.Set("Content-Type", "application/json; charset=utf-8")
			})
			if rec.Code != 204 {
				t.Fatalf("the operator's resolution = %d %s; want 204", rec.Code, rec.Body)
			}
		})
	}
}

// wantProblemIn checks that rec is the problem status/code, saying what
// was asked when it is not.
func wantProblemIn(t *testing.T, what string, rec *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	var p struct{ Type, Code, Detail string }
	json.Unmarshal(rec.Body.Bytes(), &p)
	if rec.Code != status || p.Code != code || p.Type != idemhttp.ProblemTypeBase+code || p.Detail == "" ||
		rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("%s = %d %s %s; want %d problem %s with a detail", what, rec.Code, rec.Header().Get("Content-Type"), rec.Body, status, code)
	}
}

// The hosts an admin API answers, by the address it listens on and
// --admin-hosts.
func TestAdminHosts(t *testing.T) {
	for _, c := range []struct {
		listen  string
		extra   []string
		allowed []string
		refused []string
	}{
		{"127.0.0.1:9090", nil, []string{"127.0.0.1:9090", "localhost:9090", "[::1]:9090", "[::ffff:127.0.0.1]:9090"},
			[]string{"10.0.0.5:9090", "evil.example.com:9090", "127.0.0.1:9091", "localhost", "127.1:9090"}},
		{"0.0.0.0:9090", nil, []string{"10.0.0.5:9090", "[fe80::1]:9090", "localhost:9090"},
			[]string{"10.0.0.5:9091", "evil.example.com:9090", "idem.svc:9090"}},
		{":9090", nil, []string{"192.168.1.2:9090"}, []string{"evil.example.com:9090"}},
		{"10.0.0.5:9090", nil, []string{"10.0.0.5:9090", "localhost:9090"}, []string{"10.0.0.6:9090", "10.0.0.5"}},
		{"admin.internal:9090", nil, []string{"admin.internal:9090", "ADMIN.Internal.:9090"}, []string{"10.0.0.5:9090", "admin.internal:80"}},
		{"127.0.0.1:9090", []string{"console.example.com", "localhost:8888", "[fd00::1]:443"},
			[]string{"console.example.com", "console.example.com:443", "localhost:8888", "[fd00::1]:443"},
			[]string{"localhost:8889", "example.com", "[fd00::1]:9090"}},
	} {
		a, err := newAdminHosts(c.listen, c.extra)
		if err != nil {
			t.Fatalf("newAdminHosts(%s, %v): %v", c.listen, c.extra, err)
		}
		for _, h := range c.allowed {
			if !a.allowsHost(h) {
				t.Errorf("listen %s %v: Host %s refused; want it allowed", c.listen, c.extra, h)
			}
		}
		for _, h := range c.refused {
			if a.allowsHost(h) {
				t.Errorf("listen %s %v: Host %s allowed; want it refused", c.listen, c.extra, h)
			}
		}
	}
	a, _ := newAdminHosts("127.0.0.1:80", []string{"console.example.com"})
	for origin, allowed := range map[string]bool{"http://127.0.0.1": true, "https://console.example.com": true,
		"http://console.example.com:8443": true, "https://127.0.0.1": false, "ftp://127.0.0.1": false, "null": false,
		"http://user@127.0.0.1": false, "http://127.0.0.1?x": false, "127.0.0.1:80": false} {
		if a.allowsOrigin(origin) != allowed {
			t.Errorf("Origin %s allowed = %v; want %v", origin, !allowed, allowed)
		}
	}
	for _, bad := range [][]string{{"http://admin.example.com"}, {"admin.example.com/ui"}, {"admin.example.com:0"},
		{"admin.example.com:99999"}, {""}, {"*.example.com"}, {"a b"}} {
		_, err := New(Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: newMemStore(t), Admin: testAdmin, AdminHosts: bad})
		if err == nil || !strings.Contains(err.Error(), "--admin-hosts") {
			t.Errorf("New(--admin-hosts %q) = %v; want an error naming --admin-hosts", bad, err)
		}
	}
}
