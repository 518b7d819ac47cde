package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// seenRequest is what one forwarded request carried to the upstream.
type seenRequest struct {
	header  http.Header
	trailer http.Header // read after the body
	body    string
}

// wireUpstream is an upstream that records every request it gets and
// answers with answer (nil: 201). GET /lookup/{key} is a reconcile lookup
// answered by lookup, when set.
type wireUpstream struct {
	*httptest.Server
	answer func(w http.ResponseWriter, r *http.Request, body string)
	lookup func(w http.ResponseWriter, r *http.Request)

	mu   sync.Mutex
	seen []seenRequest
}

func newWireUpstream(t *testing.T) *wireUpstream {
	u := &wireUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key, ok := strings.CutPrefix(r.URL.Path, "/lookup/"); ok && u.lookup != nil {
			r.SetPathValue("key", key)
			u.lookup(w, r)
			return
		}
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, seenRequest{header: r.Header.Clone(), trailer: r.Trailer.Clone(), body: string(b)})
		u.mu.Unlock()
		if u.answer != nil {
			u.answer(w, r, string(b))
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "created %s", b)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *wireUpstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

// wireGateway serves a gateway with cfg in front of up until the test ends.
func wireGateway(t *testing.T, up *wireUpstream, cfg Config) *httptest.Server {
	t.Helper()
	cfg.Upstream, _ = url.Parse(up.URL)
	srv := httptest.NewServer(newTestGateway(t, cfg).Handler())
	t.Cleanup(srv.Close)
	return srv
}

// send posts body to srv with the header name/value pairs.
func send(t *testing.T, srv *httptest.Server, method, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+"/charges", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// authorizationTenant is the tenant docs/reconcile.md documents for
// --tenant-from authorization: the hex SHA-256 of each Authorization
// value with its length (8 bytes, big endian) in front.
func authorizationTenant(values ...string) string {
	var b []byte
	for _, v := range values {
		b = binary.BigEndian.AppendUint64(b, uint64(len(v)))
		b = append(b, v...)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// The key a client sends quoted (an RFC 9651 string, as the IETF draft
// writes it) reaches the upstream, and the log, in the one form the store
// keeps: decoded. Otherwise the upstream records `"order-42"` while the
// reconcile lookup asks for order-42, finds nothing, and the request runs
// again.
func TestForwardsTheKeyInItsStoredForm(t *testing.T) {
	up := newWireUpstream(t)
	var logs bytes.Buffer
	// Debug: an executed request's key-event line is at debug level.
	srv := wireGateway(t, up, Config{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	for _, c := range []struct{ sent, want string }{
		{`"order-42"`, "order-42"},
		{`"a\"b\\c"`, `a"b\c`},
		{`  bare-1 `, "bare-1"},
	} {
		resp, body := send(t, srv, http.MethodPost, `{}`, "Idempotency-Key", c.sent, "Authorization", "Bearer alice")
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s: %d %s", c.sent, resp.StatusCode, body)
		}
		seen := up.requests()
		if got := seen[len(seen)-1].header.Values("Idempotency-Key"); len(got) != 1 || got[0] != c.want {
			t.Errorf("sent %s: the upstream got Idempotency-Key %q; want %q", c.sent, got, c.want)
		}
		want, _ := json.Marshal(c.want)
		if !strings.Contains(logs.String(), `"key":`+string(want)) {
			t.Errorf("sent %s: no log line with the key %s:\n%s", c.sent, want, logs.String())
		}
	}
	// The quoted and the bare form are one key: the bare retry replays.
	resp, _ := send(t, srv, http.MethodPost, `{}`, "Idempotency-Key", "order-42", "Authorization", "Bearer alice")
	if resp.Header.Get("Idempotent-Replayed") != "true" || len(up.requests()) != 3 {
		t.Fatalf("bare retry of a quoted key: replayed %q, %d upstream calls; want a replay and 3 calls",
			resp.Header.Get("Idempotent-Replayed"), len(up.requests()))
	}
}

// A Connection header naming what the gateway keys or scopes on would
// have it strip that header before forwarding (hop-by-hop, RFC 9110
// §7.6.1) while it deduplicates on it: such a request is refused, before
// any key is taken.
func TestRefusesConnectionNamingWhatItKeysOn(t *testing.T) {
	up := newWireUpstream(t)
	srv := wireGateway(t, up, Config{TenantFrom: []string{"authorization", "header:X-Tenant", "cookie:session"}})
	creds := []string{"Authorization", "Bearer alice", "X-Tenant", "acme", "Cookie", "session=s1"}
	for i, conn := range []string{"Idempotency-Key", "authorization", "X-Tenant", "cookie", "Idempotency-Fence",
		"Idempotency-Previous-Fence", "Idempotency-Tenant", "keep-alive, idempotency-key"} {
		hdr := append([]string{"Idempotency-Key", fmt.Sprintf("conn-%d", i), "Connection", conn}, creds...)
		resp, body := send(t, srv, http.MethodPost, `{}`, hdr...)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"code":"`+CodeHopByHopHeader+`"`) ||
			resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("Connection: %s: %d %s; want 400 %s", conn, resp.StatusCode, body, CodeHopByHopHeader)
		}
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the upstream got %d refused requests", n)
	}
	// Other headers may be hop-by-hop; a request the gateway does not
	// deduplicate (no key, or a method it passes through) is forwarded.
	for _, hdr := range [][]string{
		{"Idempotency-Key", "conn-ok", "Connection", "X-Hop"},
		{"Connection", "Authorization"},
	} {
		if resp, body := send(t, srv, http.MethodPost, `{}`, append(hdr, creds...)...); resp.StatusCode != http.StatusCreated {
			t.Errorf("%v: %d %s; want 201", hdr, resp.StatusCode, body)
		}
	}
	if resp, body := send(t, srv, http.MethodGet, ``, append([]string{"Idempotency-Key", "conn-get", "Connection", "Authorization"}, creds...)...); resp.StatusCode != http.StatusCreated {
		t.Errorf("GET: %d %s; want 201", resp.StatusCode, body)
	}
}

// Request trailers never reach the upstream: a client could otherwise add
// an Idempotency-Fence or an Authorization the gateway never checked.
func TestDropsRequestTrailers(t *testing.T) {
	up := newWireUpstream(t)
	srv := wireGateway(t, up, Config{})
	for i, key := range []string{"trailer-1", ""} { // protected, and passed through
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", io.MultiReader(strings.NewReader(`{"a":1}`)))
		req.ContentLength = -1 // chunked, so that trailers can follow
		req.Header.Set("Authorization", "Bearer alice")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		req.Trailer = http.Header{"Idempotency-Fence": {"999999999999"}, "Authorization": {"Bearer mallory"}, "X-Other": {"1"}}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		seen := up.requests()
		if resp.StatusCode != http.StatusCreated || len(seen) != i+1 {
			t.Fatalf("key %q: %d, %d upstream calls", key, resp.StatusCode, len(seen))
		}
		if got := seen[i]; len(got.trailer) != 0 || got.body != `{"a":1}` || got.header.Get("Authorization") != "Bearer alice" {
			t.Errorf("key %q: the upstream got trailers %v, body %q, Authorization %q; want no trailers",
				key, got.trailer, got.body, got.header.Get("Authorization"))
		}
	}
}

// lookupAnswer answers a reconcile lookup: 200 with the original status
// 201, the key echoed, the fence and the tenant echoed when not empty, and
// a Request-Id.
func lookupAnswer(w http.ResponseWriter, r *http.Request, fence, tenant string) {
	w.Header().Set("Idempotency-Key", r.PathValue("key"))
	if fence != "" {
		w.Header().Set(FenceHeader, fence)
	}
	if tenant != "" {
		w.Header().Set(TenantIDHeader, tenant)
	}
	w.Header().Set(OriginalStatusHeader, "201")
	w.Header().Set("Request-Id", "req_lookup")
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":"ch_1"}`)
}

// A reconcile lookup's 200 settles a key only when it proves it answers
// for the attempt whose outcome is unknown: it echoes the fence that
// attempt carried. A lookup keyed by the key alone that finds another
// tenant's request (another fence), or that echoes no fence, leaves the key
// UNKNOWN. The tenant reaches the upstream with the request and the
// lookup, in the bytes the admin API uses.
func TestReconcileLookupMustEchoTheFence(t *testing.T) {
	up := newWireUpstream(t)
	up.answer = func(w http.ResponseWriter, r *http.Request, _ string) { w.WriteHeader(http.StatusBadGateway) } // UNKNOWN
	fenceOf := func(key string) (fence, tenant string) {
		for _, s := range up.requests() {
			if s.header.Get("Idempotency-Key") == key {
				return s.header.Get(FenceHeader), s.header.Get(TenantIDHeader)
			}
		}
		return "", ""
	}
	var mu sync.Mutex
	lookups := map[string]http.Header{}
	up.lookup = func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("key")
		mu.Lock()
		lookups[key] = r.Header.Clone()
		mu.Unlock()
		fence, tenant := fenceOf(key)
		switch {
		case strings.HasPrefix(key, "nofence"):
			lookupAnswer(w, r, "", tenant)
		case strings.HasPrefix(key, "other"):
			lookupAnswer(w, r, "12345", tenant) // another request's: another tenant's under the same key
		case strings.HasPrefix(key, "notenant"):
			lookupAnswer(w, r, fence, "")
		case strings.HasPrefix(key, "twin"):
			// Another tenant's request with the same fence: a Redis store
			// mints a fence from its clock, and a coalesced batch reads the
			// clock once, so two tenants' first attempts at one key can
			// carry the same fence.
			lookupAnswer(w, r, fence, "another-tenant")
		default:
			lookupAnswer(w, r, fence, tenant)
		}
	}
	u, _ := url.Parse(up.URL)
	g := newTestGateway(t, Config{Upstream: u, ReconcileURL: up.URL + "/lookup/{key}", AdminToken: adminToken})
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	alice := authorizationTenant("Bearer alice")
	for _, c := range []struct {
		key     string
		settled bool
	}{{"nofence-1", false}, {"other-1", false}, {"notenant-1", false}, {"twin-1", false}, {"echo-1", true}} {
		// A client's own Idempotency-Tenant is never forwarded.
		hdr := []string{"Idempotency-Key", c.key, "Authorization", "Bearer alice", TenantIDHeader, "forged"}
		if resp, body := send(t, srv, http.MethodPost, `{}`, hdr...); resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("%s: first %d %s; want the upstream's 502", c.key, resp.StatusCode, body)
		}
		resp, body := send(t, srv, http.MethodPost, `{}`, hdr...)
		switch {
		case c.settled && (resp.StatusCode != 201 || body != `{"id":"ch_1"}` || resp.Header.Get("Idempotent-Replayed") != "true"):
			t.Errorf("%s: retry %d %s; want the lookup's 201 replayed", c.key, resp.StatusCode, body)
		case !c.settled && (resp.StatusCode != 503 || !strings.Contains(body, idemhttp.CodeOutcomeUnknown)):
			t.Errorf("%s: retry %d %s; want 503 outcome_unknown: the lookup did not prove it answers for this attempt", c.key, resp.StatusCode, body)
		}
		fence, tenant := fenceOf(c.key)
		mu.Lock()
		lh := lookups[c.key]
		mu.Unlock()
		if tenant != alice || lh.Get(TenantIDHeader) != alice || lh.Get(FenceHeader) != fence || lh.Get("Idempotency-Key") != c.key {
			t.Errorf("%s: upstream got tenant %q; lookup got tenant %q, fence %q (request's %q), key %q; want tenant %q",
				c.key, tenant, lh.Get(TenantIDHeader), lh.Get(FenceHeader), fence, lh.Get("Idempotency-Key"), alice)
		}
	}
	if n := len(up.requests()); n != 5 {
		t.Fatalf("%d upstream executions; want 5, one a key", n)
	}
	// The tenant the upstream got is the admin API's {tenant}.
	req := adminRequest(http.MethodGet, "/v1/keys/"+alice+"/echo-1", "")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	rec := httptest.NewRecorder()
	g.AdminHandler().ServeHTTP(rec, req)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"state":"COMPLETED"`) {
		t.Fatalf("admin GET with the forwarded tenant: %d %s", rec.Code, rec.Body)
	}
	// A request the gateway does not deduplicate carries no tenant.
	send(t, srv, http.MethodGet, ``, "Authorization", "Bearer alice", TenantIDHeader, "forged")
	if s := up.requests(); s[len(s)-1].header.Get(TenantIDHeader) != "" {
		t.Fatalf("a passed-through request carried %s %q", TenantIDHeader, s[len(s)-1].header.Get(TenantIDHeader))
	}
}

// A response settled by the reconcile lookup is replayed with the headers
// --replay-headers names, as an ordinary replay is (stripe-go reads
// Request-Id back).
func TestReconciledReplayCarriesReplayHeaders(t *testing.T) {
	up := newWireUpstream(t)
	up.answer = func(w http.ResponseWriter, r *http.Request, _ string) { w.WriteHeader(http.StatusBadGateway) }
	up.lookup = func(w http.ResponseWriter, r *http.Request) {
		lookupAnswer(w, r, r.Header.Get(FenceHeader), r.Header.Get(TenantIDHeader)) // the upstream's record is this attempt's
	}
	srv := wireGateway(t, up, Config{ReconcileURL: up.URL + "/lookup/{key}"})
	hdr := []string{"Idempotency-Key", "rid-1", "Authorization", "Bearer alice"}
	send(t, srv, http.MethodPost, `{}`, hdr...)
	for range 2 {
		resp, body := send(t, srv, http.MethodPost, `{}`, hdr...)
		if resp.StatusCode != 201 || resp.Header.Get("Idempotent-Replayed") != "true" || resp.Header.Get("Request-Id") != "req_lookup" ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("reconciled replay %d %s %v; want 201 with Request-Id req_lookup", resp.StatusCode, body, resp.Header)
		}
	}
}

// Under --error-format stripe an upstream 400 (its parameters failed
// validation) is not stored, as Stripe stores nothing then: the corrected
// request under the same key runs. The problem format stores it.
func TestStripeFormatReleasesAnUpstream400(t *testing.T) {
	for _, format := range []idemhttp.ErrorFormat{idemhttp.ErrorFormatStripe, idemhttp.ErrorFormatProblem} {
		t.Run(format.String(), func(t *testing.T) {
			up := newWireUpstream(t)
			up.answer = func(w http.ResponseWriter, r *http.Request, body string) {
				if strings.Contains(body, "-1") {
					w.WriteHeader(http.StatusBadRequest)
					io.WriteString(w, `{"error":{"type":"invalid_request_error","param":"amount"}}`)
					return
				}
				w.WriteHeader(http.StatusOK)
			}
			srv := wireGateway(t, up, Config{ErrorFormat: format})
			hdr := []string{"Idempotency-Key", "k400", "Authorization", "Bearer sk_test_1"}
			if resp, body := send(t, srv, http.MethodPost, `{"amount":-1}`, hdr...); resp.StatusCode != 400 {
				t.Fatalf("invalid: %d %s", resp.StatusCode, body)
			}
			resp, body := send(t, srv, http.MethodPost, `{"amount":1}`, hdr...)
			if format == idemhttp.ErrorFormatStripe && (resp.StatusCode != 200 || len(up.requests()) != 2) {
				t.Fatalf("corrected request: %d %s after %d upstream calls; want it run (200)", resp.StatusCode, body, len(up.requests()))
			}
			if format == idemhttp.ErrorFormatProblem && (resp.StatusCode != 422 || !strings.Contains(body, idemhttp.CodeKeyMismatch)) {
				t.Fatalf("corrected request: %d %s; want 422 key_mismatch (the 400 is stored)", resp.StatusCode, body)
			}
		})
	}
}

// Under --error-format stripe the tenant is Authorization and
// Stripe-Account together (Stripe Connect): a platform reusing a key for
// two connected accounts gets two executions, never account A's charge
// replayed to account B.
func TestStripeFormatScopesKeysByStripeAccount(t *testing.T) {
	up := newWireUpstream(t)
	srv := wireGateway(t, up, Config{ErrorFormat: idemhttp.ErrorFormatStripe})
	post := func(account string) *http.Response {
		resp, body := send(t, srv, http.MethodPost, `{"amount":1}`, "Idempotency-Key", "connect-1", "Authorization", "Bearer sk_platform", "Stripe-Account", account)
		if resp.StatusCode != 201 {
			t.Fatalf("%s: %d %s", account, resp.StatusCode, body)
		}
		return resp
	}
	post("acct_A")
	if r := post("acct_B"); r.Header.Get("Idempotent-Replayed") != "" || len(up.requests()) != 2 {
		t.Fatalf("acct_B replayed %q after %d upstream calls; want its own execution", r.Header.Get("Idempotent-Replayed"), len(up.requests()))
	}
	if r := post("acct_A"); r.Header.Get("Idempotent-Replayed") != "true" || len(up.requests()) != 2 {
		t.Fatalf("acct_A's retry: replayed %q, %d upstream calls; want a replay", r.Header.Get("Idempotent-Replayed"), len(up.requests()))
	}
	seen := up.requests()
	if a, b := seen[0].header.Get(TenantIDHeader), seen[1].header.Get(TenantIDHeader); a == b || a == "" {
		t.Fatalf("acct_A and acct_B forwarded tenants %q and %q; want two", a, b)
	}
}

// The tenant is a documented, stable value (docs/reconcile.md): an
// upstream can compute it from the Authorization it gets.
func TestAuthorizationTenantIsTheDocumentedHash(t *testing.T) {
	sources, err := parseTenantSources([]string{"authorization"})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Add("Authorization", "Bearer alice")
	got, err := tenantFunc(sources, false)(r)
	if want := authorizationTenant("Bearer alice"); err != nil || got != want {
		t.Fatalf("tenant %q, %v; want %q", got, err, want)
	}
}
