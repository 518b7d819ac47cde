package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// Issue 22, item 8: a --reconcile-url that New refuses is quoted without
// its password, as --upstream is.
func TestReconcileURLPasswordRedacted(t *testing.T) {
	const secret = "hunter2"
	up, _ := url.Parse("http://127.0.0.1:1")
	for _, bad := range []string{
		"http://user:" + secret + "@host/lookup",          // no {key}
		"ftp://user:" + secret + "@host/lookup/{key}",     // not http
		"http://user:" + secret + "@[::1/lookup/{key}",    // does not parse
		"http://user:" + secret + "@h:p%zz/lookup/{key}",  // does not parse
		"https://user:" + secret + "@/lookup/{key}?x=%zz", // no host
	} {
		_, err := New(Config{Upstream: up, Store: newMemStore(t), ReconcileURL: bad})
		if err == nil {
			t.Errorf("New(--reconcile-url %q) succeeded", bad)
			continue
		}
		if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "--reconcile-url") {
			t.Errorf("New(--reconcile-url %q) = %v; want an error about --reconcile-url without the password", bad, err)
		}
	}
}

func newMemStore(t *testing.T) store.Store {
	t.Helper()
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// adminGateway is a gateway on a memory store whose admin API tests call
// in process.
func adminGateway(t *testing.T, cfg Config) *Gateway {
	t.Helper()
	if cfg.Upstream == nil {
		cfg.Upstream, _ = url.Parse("http://127.0.0.1:1")
	}
	return newTestGateway(t, cfg)
}

// admin makes one admin API call and returns the status and the body.
func admin(t *testing.T, g *Gateway, method, path, body string) (int, string) {
	t.Helper()
	req := adminRequest(method, path, body)
	if g.cfg.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+g.cfg.AdminToken)
	}
	w := httptest.NewRecorder()
	g.AdminHandler().ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Result().Body)
	if w.Code >= 400 && w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("%s %s = %d with Content-Type %q; want application/problem+json", method, path, w.Code, w.Header().Get("Content-Type"))
	}
	return w.Code, string(b)
}

// unknownKey makes id UNKNOWN through the engine and returns its fence.
func unknownKey(t *testing.T, e *idem.Engine, id store.ID) int64 {
	t.Helper()
	ctx := context.Background()
	att, err := e.Begin(ctx, idem.Request{Tenant: id.Tenant, Key: id.Key, NoFingerprint: true})
	if err != nil || att.Outcome != idem.Acquired {
		t.Fatalf("Begin(%+v) = %+v, %v", id, att, err)
	}
	if err := att.Lease.MarkUnknown(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	return att.Lease.Fence()
}

// Issue 22, item 12: a resolution followed by more data is refused, and
// nothing changes.
func TestResolveRefusesTrailingData(t *testing.T) {
	g := adminGateway(t, Config{})
	id := store.ID{Tenant: "acme", Key: "trailing"}
	fence := unknownKey(t, g.Engine(), id)
	good := fmt.Sprintf(`{"fence":%d,"outcome":"not_executed"}`, fence)
	for _, tail := range []string{" x", `{"fence":1}`, "\n{}", " ]", `"`} {
		code, body := admin(t, g, "POST", "/v1/keys/acme/trailing/resolve", good+tail)
		if code != 400 || !strings.Contains(body, `"resolve_invalid"`) {
			t.Errorf("resolve %q = %d %s; want 400 resolve_invalid", good+tail, code, body)
		}
	}
	if rec, err := g.Engine().Get(context.Background(), id); err != nil || rec.State != store.StateUnknown {
		t.Fatalf("after refused resolutions: %+v, %v; want the key still UNKNOWN", rec, err)
	}
	if code, body := admin(t, g, "POST", "/v1/keys/acme/trailing/resolve", good+" \r\n\t"); code != 204 {
		t.Fatalf("resolve with trailing white space = %d %s; want 204", code, body)
	}
}

// Issue 22, item 12: a resolution's size follows --max-response, and a
// larger one is refused with 413 before it is read whole.
func TestResolveBodyBound(t *testing.T) {
	resolution := func(fence int64, body string) string {
		b, _ := json.Marshal(map[string]any{"fence": fence, "outcome": "completed", "status": 201, "body": body})
		return string(b)
	}
	g := adminGateway(t, Config{}) // --max-response 1 MiB
	id := store.ID{Tenant: "acme", Key: "big"}
	fence := unknownKey(t, g.Engine(), id)
	for _, size := range []int{3 << 20, 1<<20 + 1} { // over the JSON bound; within it, a body over --max-response
		code, body := admin(t, g, "POST", "/v1/keys/acme/big/resolve", resolution(fence, strings.Repeat("x", size)))
		if code != 413 || !strings.Contains(body, `"resolve_too_large"`) {
			t.Errorf("a resolution with a %d-byte body = %d %.300s; want 413 resolve_too_large", size, code, body)
		}
	}
	if rec, err := g.Engine().Get(context.Background(), id); err != nil || rec.State != store.StateUnknown {
		t.Fatalf("after refused resolutions: %+v, %v; want the key still UNKNOWN", rec, err)
	}
	if code, body := admin(t, g, "POST", "/v1/keys/acme/big/resolve", resolution(fence, strings.Repeat("x", 1<<20))); code != 204 {
		t.Fatalf("a resolution with a body of --max-response = %d %.300s; want 204", code, body)
	}

	g = adminGateway(t, Config{MaxResponse: 4 << 20})
	fence = unknownKey(t, g.Engine(), id)
	if code, body := admin(t, g, "POST", "/v1/keys/acme/big/resolve", resolution(fence, strings.Repeat("x", 3<<20))); code != 204 {
		t.Fatalf("--max-response 4MiB, a 3 MiB body = %d %.300s; want 204", code, body)
	}
}

// Issue 22, item 12: every tenant is addressable in the admin API's paths
// and its tenant parameter: a segment of n dashes is the tenant of n-1
// dashes ("-" is the empty tenant); every other segment is the tenant
// itself, percent-decoded.
func TestAdminReachesEveryTenant(t *testing.T) {
	g := adminGateway(t, Config{})
	for segment, tenant := range map[string]string{"-": "", "--": "-", "---": "--", "-x": "-x", "x-": "x-",
		"%2E": ".", "%2E%2E": "..", "a%2Fb": "a/b", "%25": "%"} {
		id := store.ID{Tenant: tenant, Key: "k"}
		fence := unknownKey(t, g.Engine(), id)
		code, body := admin(t, g, "GET", "/v1/keys/"+segment+"/k", "")
		var rec RecordView
		if code != 200 || json.Unmarshal([]byte(body), &rec) != nil || rec.Tenant != tenant || rec.Fence != fence {
			t.Errorf("GET /v1/keys/%s/k = %d %s; want tenant %q's record", segment, code, body, tenant)
		}
		code, body = admin(t, g, "GET", "/v1/keys?state=unknown&tenant="+segment, "")
		var page KeyPage
		if code != 200 || json.Unmarshal([]byte(body), &page) != nil || len(page.Keys) != 1 || page.Keys[0].Tenant != tenant {
			t.Errorf("GET /v1/keys?state=unknown&tenant=%s = %d %s; want tenant %q's one key", segment, code, body, tenant)
		}
		code, body = admin(t, g, "POST", "/v1/keys/"+segment+"/k/resolve", fmt.Sprintf(`{"fence":%d,"outcome":"not_executed"}`, fence))
		if code != 204 {
			t.Errorf("resolve /v1/keys/%s/k = %d %s; want 204", segment, code, body)
		}
	}
}

// Issue 22, item 12: an --admin-token that could never match a request's
// Authorization header is refused at start.
func TestBlankAdminTokenRefused(t *testing.T) {
	up, _ := url.Parse("http://127.0.0.1:1")
	for _, token := range []string{" ", "\t", " s3cret", "s3cret ", "s3c\nret", "s3c\x00ret"} {
		_, err := New(Config{Upstream: up, Store: newMemStore(t), Admin: "127.0.0.1:0", AdminToken: token})
		if err == nil || !strings.Contains(err.Error(), "--admin-token") {
			t.Errorf("New(--admin-token %q) = %v; want an error naming --admin-token", token, err)
		}
	}
	if _, err := New(Config{Upstream: up, Store: newMemStore(t), Admin: "127.0.0.1:0", AdminToken: "s3c ret-0123456789"}); err != nil {
		t.Errorf("New(--admin-token with an inner space) = %v; want it accepted", err)
	}
}

// Issue 22, item 7: a list cursor the store did not make for this
// listing (malformed, or another tenant's) is the client's error: 400
// cursor_invalid, not 503 store_unavailable.
func TestAdminListRefusesBadCursors(t *testing.T) {
	for name, newStore := range testenv.Stores() {
		t.Run(name, func(t *testing.T) {
			g := adminGateway(t, Config{Store: newStore(t)})
			for _, id := range []store.ID{{Tenant: "acme", Key: "a"}, {Tenant: "acme", Key: "b"}, {Tenant: "globex", Key: "a"}} {
				unknownKey(t, g.Engine(), id)
			}
			code, body := admin(t, g, "GET", "/v1/keys?state=unknown&tenant=acme&limit=1", "")
			var page KeyPage
			if code != 200 || json.Unmarshal([]byte(body), &page) != nil || page.Next == "" {
				t.Fatalf("first page = %d %s; want one key and a next", code, body)
			}
			for _, query := range []string{"after=x", "tenant=acme&after=x", "tenant=acme&after=%FF", "tenant=globex&after=" + url.QueryEscape(page.Next)} {
				code, body := admin(t, g, "GET", "/v1/keys?state=unknown&"+query, "")
				if code != 400 || !strings.Contains(body, `"cursor_invalid"`) {
					t.Errorf("GET /v1/keys?state=unknown&%s = %d %s; want 400 cursor_invalid", query, code, body)
				}
			}
			if code, body := admin(t, g, "GET", "/v1/keys?state=unknown&tenant=acme&after="+url.QueryEscape(page.Next), ""); code != 200 || !strings.Contains(body, `"key":"b"`) {
				t.Fatalf("second page = %d %s; want key b", code, body)
			}
		})
	}
}

// docs/problems.md says the admin API answers problem+json always, but a
// path no route has (GET /v1/nope) and a method a route does not take
// (PUT, or POST, of a key) got net/http's "404 page not found" in
// text/plain, so a client that reads the code had none. They get
// admin_no_route (404), or admin_method_not_allowed (405, with Allow);
// still after the token.
func TestAdminNoRouteIsAProblem(t *testing.T) {
	g := adminGateway(t, Config{AdminToken: adminToken})
	for _, c := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/v1/nope", 404, CodeAdminNoRoute, ""},
		{"GET", "/v1/keys/a/b/c", 404, CodeAdminNoRoute, ""},
		{"PUT", "/v1/keys/a/b", 405, CodeAdminMethodRefused, "DELETE, GET, HEAD"},
		{"POST", "/v1/stats", 405, CodeAdminMethodRefused, "GET, HEAD"},
	} {
		code, _ := admin(t, g, c.method, c.path, "{}") // admin checks problem+json
		rec := asToken(g, adminToken, c.method, c.path, "{}")
		wantProblemIn(t, c.method+" "+c.path, rec, c.status, c.code)
		if code != c.status || rec.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s = %d, Allow %q; want %d, Allow %q", c.method, c.path, code, rec.Header().Get("Allow"), c.status, c.allow)
		}
		wantProblemIn(t, c.method+" "+c.path+" without the token", asToken(g, "", c.method, c.path, "{}"), 401, CodeAdminUnauthorized)
	}
}

// The engine logs a failed lookup's error, and a network error names the
// URL: a --reconcile-url's password and ?token= went into the log line
// "idem: reconciliation failed" whole, though they are hidden everywhere
// else (at start, in errors, in the answer of an admin reconcile).
func TestReconcileLookupErrorHidesURLSecrets(t *testing.T) {
	logs := &syncBuffer{}
	g := adminGateway(t, Config{AdminToken: adminToken, ReconcileURL: "http://ops:hunter2@127.0.0.1:1/lookup/{key}?token=RECTOKEN&x=1",
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	id := store.ID{Tenant: "acme", Key: "k"}
	unknownKey(t, g.Engine(), id)
	status, body := admin(t, g, "POST", "/v1/keys/acme/k/reconcile", "")
	if status != 200 || !strings.Contains(body, "the lookup failed") {
		t.Fatalf("reconcile = %d %s; want 200, the lookup failed", status, body)
	}
	line := logs.String()
	if !strings.Contains(line, "reconciliation failed") || !strings.Contains(line, "127.0.0.1:1/lookup/k") {
		t.Fatalf("the log has no line of the failed lookup naming its URL:\n%s", line)
	}
	for _, secret := range []string{"hunter2", "RECTOKEN"} {
		if strings.Contains(line+body, secret) {
			t.Errorf("the log or the answer holds the URL's secret %q:\n%s\n%s", secret, line, body)
		}
	}
}

// An audit: a reconcile URL's ?code= (Azure Functions' key), ?key= (a
// Google API key) and ?sig= (an Azure SAS signature) went into the log
// whole: only names holding a longer word (token, secret...) were
// secrets. They are hidden where the URL is shown, and the lookup still
// sends them, its {key} filled in.
func TestReconcileURLQuerySecretsHidden(t *testing.T) {
	queries := make(chan string, 1)
	lookup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries <- r.URL.Path + "?" + r.URL.RawQuery
		w.WriteHeader(http.StatusNotFound)
	}))
	defer lookup.Close()
	const query = "?code=AZFUNCSECRET1&key=GOOGLEKEY3&sig=SASSIG4&x=1"
	for _, base := range []string{lookup.URL, "http://127.0.0.1:1"} {
		logs := &syncBuffer{}
		g := adminGateway(t, Config{AdminToken: adminToken, ReconcileURL: base + "/lookup/{key}" + query,
			Logger: slog.New(slog.NewJSONHandler(logs, nil))})
		id := store.ID{Tenant: "acme", Key: "k"}
		unknownKey(t, g.Engine(), id)
		status, body := admin(t, g, "POST", "/v1/keys/acme/k/reconcile", "")
		if status != 200 {
			t.Fatalf("reconcile = %d %s; want 200", status, body)
		}
		if base == lookup.URL {
			if got := <-queries; got != "/lookup/k"+query {
				t.Errorf("the lookup asked %s; want /lookup/k%s, the template as written", got, query)
			}
			continue
		}
		line := logs.String()
		if !strings.Contains(line, "reconciliation failed") || !strings.Contains(line, "127.0.0.1:1/lookup/k?code=xxxxx&key=xxxxx&sig=xxxxx&x=1") {
			t.Fatalf("the log has no line of the failed lookup naming its URL, secrets hidden:\n%s", line)
		}
		for _, secret := range []string{"AZFUNCSECRET1", "GOOGLEKEY3", "SASSIG4"} {
			if strings.Contains(line+body, secret) {
				t.Errorf("the log or the answer holds the URL's secret %q:\n%s\n%s", secret, line, body)
			}
		}
	}
}

// A template with a placeholder in the host ({key}.lookup.internal) was
// accepted: a client's key then chose the server the gateway sent its
// bearer token to, and a key that is no host name failed every lookup.
// A placeholder outside the path and the query is refused at start, by
// the flag or the route's config key, naming the placeholder and never
// the URL's secrets; one in the path or the query is taken.
func TestReconcileURLPlaceholderOutsidePathRefused(t *testing.T) {
	up, _ := url.Parse("http://127.0.0.1:1")
	for template, want := range map[string]string{
		"https://{key}.lookup.internal/x":                          "{key} in its host or port",
		"http://ops:hunter2@{key}.lookup.test/x?token=RECTOKEN":    "{key} in its host or port",
		"http://lookup.test:{fence}/x/{key}":                       "{fence} in its host or port",
		"http://{tenant}.lookup.test/x/{key}?token=RECTOKEN":       "{tenant} in its host or port",
		"http://{key}:hunter2@lookup.test/x":                       "{key} in its user information",
		"http{key}://lookup.test/x":                                "{key} in its scheme",
		"http://lookup.test/x/{key}#{tenant}":                      "{tenant} in its fragment",
		"http://lookup.test/x?token=RECTOKEN#k={key}":              "{key} in its fragment",
		"http://lookup.test?t=1@{key}.evil/{key}#x":                "", // "@" in the query: the host is lookup.test
		"http://lookup.test/x/{key}?tenant={tenant}&fence={fence}": "",
	} {
		for _, cfg := range []struct {
			flag string
			cfg  Config
		}{
			{"--reconcile-url", Config{ReconcileURL: template}},
			{"routes[0].reconcile-url", Config{Routes: []Route{{Pattern: "POST /a", Name: "a", ReconcileURL: template}}}},
		} {
			cfg.cfg.Upstream, cfg.cfg.Store = up, newMemStore(t)
			_, err := New(cfg.cfg)
			switch {
			case want == "" && err != nil:
				t.Errorf("%s %q: %v; want it taken", cfg.flag, template, err)
			case want == "":
			case err == nil || !strings.Contains(err.Error(), cfg.flag) || !strings.Contains(err.Error(), want):
				t.Errorf("%s %q: %v; want an error naming %s, saying %q", cfg.flag, template, err, cfg.flag, want)
			case strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "RECTOKEN"):
				t.Errorf("%s %q: %v; the error quotes the URL's secret", cfg.flag, template, err)
			}
		}
	}
}
