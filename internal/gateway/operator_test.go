package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/store"
)

const adminToken = "s3cret-admin-token"

// askAdmin sends one request to g's admin API, with the token unless
// anonymous, and returns the answer.
func askAdmin(t *testing.T, g *Gateway, method, path string, anonymous bool) *httptest.ResponseRecorder {
	t.Helper()
	req := adminRequest(method, path, "")
	if !anonymous {
		req.Header.Set("Authorization", "Bearer "+adminToken)
	}
	rec := httptest.NewRecorder()
	g.AdminHandler().ServeHTTP(rec, req)
	return rec
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("answer %d %q: %v", rec.Code, rec.Body, err)
	}
	return v
}

func wantProblem(t *testing.T, rec *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	p := decode[struct{ Code string }](t, rec)
	if rec.Code != status || p.Code != code || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/problem+json") {
		t.Fatalf("answer %d %s %q; want %d problem %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body, status, code)
	}
}

// settle makes the key of tenant acme UNKNOWN, or COMPLETED with result.
func settle(t *testing.T, g *Gateway, key string, result *store.Result) store.Record {
	t.Helper()
	ctx := context.Background()
	a, err := g.Engine().Begin(ctx, idem.Request{Tenant: "acme", Key: key, Fingerprint: "fp"})
	if err != nil || a.Outcome != idem.Acquired {
		t.Fatalf("Begin(%s) = %v, %v", key, a.Outcome, err)
	}
	if result == nil {
		err = a.Lease.MarkUnknown(ctx, "upstream_no_response: EOF")
	} else {
		err = a.Lease.Complete(ctx, *result)
	}
	if err != nil {
		t.Fatal(err)
	}
	rec, err := g.Engine().Get(ctx, store.ID{Tenant: "acme", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// The console's files are served to anyone, with the security headers,
// and hold no data; the calls it makes need the token.
func TestConsoleIsMountedWithItsHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	defer up.Close()
	u, _ := url.Parse(up.URL + "/base?api_key=upstream-secret")
	u.User = url.UserPassword("user", "pw")
	g := newTestGateway(t, Config{Upstream: u, AdminToken: adminToken})
	page := askAdmin(t, g, http.MethodGet, "/ui/", true)
	h := page.Header()
	if page.Code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/html") ||
		h.Get("Content-Security-Policy") != console.ContentSecurityPolicy || h.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.Contains(page.Body.String(), `<script type="module" src="js/main.js">`) {
		t.Fatalf("GET /ui/ without a token = %d %v %.200q; want the page with its CSP and nosniff", page.Code, h, page.Body)
	}
	if strings.Contains(page.Body.String(), adminToken) {
		t.Fatal("the page holds the admin token")
	}
	if js := askAdmin(t, g, http.MethodGet, "/ui/js/main.js", true); js.Code != http.StatusOK || !strings.HasPrefix(js.Header().Get("Content-Type"), "text/javascript") {
		t.Fatalf("GET /ui/js/main.js = %d %s; want a JavaScript module", js.Code, js.Header().Get("Content-Type"))
	}
	if root := askAdmin(t, g, http.MethodGet, "/ui", true); root.Code/100 != 3 || root.Header().Get("Location") != "/ui/" {
		t.Fatalf("GET /ui = %d %s; want a redirect to /ui/", root.Code, root.Header().Get("Location"))
	}
	if dir := askAdmin(t, g, http.MethodGet, "/ui/js/", true); dir.Code != http.StatusNotFound {
		t.Fatalf("GET /ui/js/ = %d; want 404, no listing", dir.Code)
	}
	if post := askAdmin(t, g, http.MethodPost, "/ui/", true); post.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /ui/ = %d; want 405", post.Code)
	}
	for _, call := range []struct{ method, path string }{
		{http.MethodGet, "/v1/stats"},
		{http.MethodGet, "/v1/keys/acme/k/result"},
		{http.MethodPost, "/v1/keys/acme/k/reconcile"},
	} {
		wantProblem(t, askAdmin(t, g, call.method, call.path, true), http.StatusUnauthorized, CodeAdminUnauthorized)
	}
	if rec := askAdmin(t, g, http.MethodGet, "/v1/keys/acme/k", false); rec.Code != http.StatusNotFound || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("the key API behind the console = %d %v; want 404 with nosniff", rec.Code, rec.Header())
	}

	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	for i := range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charge", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer client")
		req.Header.Set(idemhttp.HeaderKey, "k"+strconv.Itoa(i%2)) // k0, k1, then k0 replayed
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	g.stats.sample(time.Now())
	rec := askAdmin(t, g, http.MethodGet, "/v1/stats", false)
	st := decode[statsPage](t, rec)
	if rec.Code != http.StatusOK || len(st.Samples) != 1 || st.IntervalMillis != 10000 || st.Reconcile ||
		st.Upstream != up.URL+"/base" || st.Samples[0].Requests["executed"] != 2 || st.Samples[0].Requests["replayed"] != 1 {
		t.Fatalf("GET /v1/stats = %d %q; want one sample of 2 requests run and 1 replayed, the upstream without credentials or query", rec.Code, rec.Body)
	}
}

// GET .../result answers a stored response as JSON, text or base64, never
// as the stored type.
func TestAdminResult(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1")
	g := newTestGateway(t, Config{Upstream: u, AdminToken: adminToken})
	hostile := "</script><script>alert(1)</script>"
	settle(t, g, "text", &store.Result{Status: 201, Header: http.Header{"Content-Type": {"text/html"}}, Body: []byte(hostile)})
	settle(t, g, "bytes", &store.Result{Status: 200, Body: []byte{0xff, 0x00, 0xfe}})
	settle(t, g, "unknown", nil)

	rec := askAdmin(t, g, http.MethodGet, "/v1/keys/acme/text/result", false)
	v := decode[resultView](t, rec)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" || v.Status != 201 ||
		v.Body == nil || *v.Body != hostile || v.BodyBase64 != nil || v.Header.Get("Content-Type") != "text/html" || v.BodyBytes != len(hostile) {
		t.Fatalf("result of a text body = %d %s %q; want it as a JSON string", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	if strings.Contains(rec.Body.String(), "</script>") {
		t.Fatalf("the JSON holds a raw </script>: %q", rec.Body)
	}
	rec = askAdmin(t, g, http.MethodGet, "/v1/keys/acme/bytes/result", false)
	if v := decode[resultView](t, rec); rec.Code != http.StatusOK || v.Body != nil || v.BodyBase64 == nil || *v.BodyBase64 != "/wD+" || v.BodyBytes != 3 {
		t.Fatalf("result of a binary body = %d %q; want base64", rec.Code, rec.Body)
	}
	wantProblem(t, askAdmin(t, g, http.MethodGet, "/v1/keys/acme/unknown/result", false), http.StatusConflict, CodeKeyNotCompleted)
	wantProblem(t, askAdmin(t, g, http.MethodGet, "/v1/keys/acme/absent/result", false), http.StatusNotFound, CodeKeyNotFound)
}

// POST .../reconcile asks the lookup about one key and says what it
// found, or why it found nothing, without the lookup's URL.
func TestAdminReconcileNow(t *testing.T) {
	lookup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(idemhttp.HeaderKey)
		switch key {
		case "found":
			w.Header().Set(idemhttp.HeaderKey, key)
			w.Header().Set(FenceHeader, r.Header.Get(FenceHeader))
			w.Header().Set(TenantIDHeader, r.Header.Get(TenantIDHeader))
			w.Header().Set(OriginalStatusHeader, "201")
			w.Write([]byte(`{"id":"ch_1"}`))
		case "never":
			w.Header().Set(idemhttp.HeaderKey, key)
			w.WriteHeader(http.StatusNotFound)
		case "cut":
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
		default:
			w.Header().Set(idemhttp.HeaderKey, key)
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer lookup.Close()
	u, _ := url.Parse("http://127.0.0.1:1")
	g := newTestGateway(t, Config{Upstream: u, AdminToken: adminToken, ReconcileURL: lookup.URL + "/by-key/{key}?api_key=lookup-secret"})
	for _, key := range []string{"found", "never", "broken", "cut"} {
		settle(t, g, key, nil)
	}
	reconcile := func(key string) (*httptest.ResponseRecorder, reconcileView) {
		rec := askAdmin(t, g, http.MethodPost, "/v1/keys/acme/"+key+"/reconcile", false)
		if rec.Code != http.StatusOK {
			return rec, reconcileView{}
		}
		return rec, decode[reconcileView](t, rec)
	}
	if rec, v := reconcile("found"); v.Verdict != "completed" || v.Record == nil || v.Record.State != "COMPLETED" || v.Record.Status != 201 {
		t.Fatalf("reconcile of a key the lookup found = %d %q; want completed, the record COMPLETED with 201", rec.Code, rec.Body)
	}
	if rec, v := reconcile("never"); v.Verdict != "not_executed" || v.Record != nil {
		t.Fatalf("reconcile of a key never run = %d %q; want not_executed", rec.Code, rec.Body)
	}
	wantProblem(t, askAdmin(t, g, http.MethodGet, "/v1/keys/acme/never", false), http.StatusNotFound, CodeKeyNotFound)
	if rec, v := reconcile("broken"); v.Verdict != "unknown" || v.Record == nil || v.Record.State != "UNKNOWN" || !strings.Contains(v.Detail, "answered 500") ||
		v.LookupStatus != 500 {
		t.Fatalf("reconcile with a lookup answering 500 = %d %q; want unknown, saying so, with the lookup's status", rec.Code, rec.Body)
	}
	// That lookup ended without a verdict; its claim on the key holds for
	// the lookup's timeout and 2 s more, and no one asks again before.
	if rec, v := reconcile("broken"); v.Verdict != "unknown" || !strings.Contains(v.Detail, "holds its claim") {
		t.Fatalf("reconcile again at once = %d %q; want unknown, the lookup not asked", rec.Code, rec.Body)
	}
	rec, v := reconcile("cut")
	if v.Verdict != "unknown" || !strings.Contains(v.Detail, "the lookup failed") || strings.Contains(rec.Body.String(), "lookup-secret") || v.LookupStatus != 0 {
		t.Fatalf("reconcile with a lookup cutting the connection = %d %q; want unknown, the failure, not the URL", rec.Code, rec.Body)
	}
	wantProblem(t, askAdmin(t, g, http.MethodPost, "/v1/keys/acme/found/reconcile", false), http.StatusConflict, CodeKeyNotUnknown)
	wantProblem(t, askAdmin(t, g, http.MethodPost, "/v1/keys/acme/absent/reconcile", false), http.StatusNotFound, CodeKeyNotFound)
	// Each reconciliation is audited; one that settles is a change.
	var audited []string
	for _, r := range g.audit.find(func(r AuditRecord) bool { return r.Action == ActionReconcile }) {
		audited = append(audited, fmt.Sprintf("%s:%s:%s>%s", r.Key, r.Outcome, r.StateBefore, r.StateAfter))
	}
	if got := strings.Join(audited, " "); got != "absent:unchanged:absent>absent found:unchanged:COMPLETED>COMPLETED cut:unchanged:UNKNOWN>UNKNOWN "+
		"broken:unchanged:UNKNOWN>UNKNOWN broken:unchanged:UNKNOWN>UNKNOWN never:not_executed:UNKNOWN>absent found:completed:UNKNOWN>COMPLETED" {
		t.Fatalf("the audit of the reconciliations, newest first: %s", got)
	}

	plain := newTestGateway(t, Config{Upstream: u, AdminToken: adminToken})
	settle(t, plain, "k", nil)
	wantProblem(t, askAdmin(t, plain, http.MethodPost, "/v1/keys/acme/k/reconcile", false), http.StatusConflict, CodeReconcileUnavailable)
}
