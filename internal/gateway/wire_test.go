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
	srv := wireGateway(t, up, Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
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
