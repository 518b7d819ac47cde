package idemhttp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// eachStore runs f once for each kind of store, in real time, with its
// constructor; eachStoreInBubble runs f on each store, the memory store in
// a synctest bubble, where the middleware's Wait, the engine's leases and
// the finalize timeout run on a fake clock. A test in the bubble calls the
// middleware directly, with a recorder: a server's goroutines wait on the
// network, which is no durable block, so the bubble's clock would never
// move.
var (
	eachStore         = storekit.EachKind
	eachStoreInBubble = storekit.EachStore
)

func newEngine(t *testing.T, s store.Store, o *idem.Options) *idem.Engine {
	t.Helper()
	e, err := idem.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// newMiddleware makes a middleware for a test. Options that say nothing
// of tenants put the test's requests without Authorization in the shared
// anonymous scope (AllowAnonymous), so that a test about something else
// need not send credentials; TestAnonymousRequestsRefusedByDefault holds
// the default.
func newMiddleware(t *testing.T, e *idem.Engine, o *idemhttp.Options) func(http.Handler) http.Handler {
	t.Helper()
	var opts idemhttp.Options
	if o != nil {
		opts = *o
	}
	if opts.Tenant == nil && opts.TenantHeader == "" {
		opts.AllowAnonymous = true
	}
	mw, err := idemhttp.New(e, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// outcomes records what OnOutcome reports.
type outcomes struct {
	mu   sync.Mutex
	list []idemhttp.Outcome
	ch   chan idemhttp.Outcome // when set, every outcome is also sent here
}

func (o *outcomes) record(_ *http.Request, out idemhttp.Outcome) {
	o.mu.Lock()
	o.list = append(o.list, out)
	o.mu.Unlock()
	if o.ch != nil {
		o.ch <- out
	}
}

func (o *outcomes) count(want idemhttp.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, out := range o.list {
		if out == want {
			n++
		}
	}
	return n
}

// call is one request a test sends.
type call struct {
	method  string // POST when empty
	path    string // /pay when empty
	key     string // no header when empty; use keys for several or empty values
	keys    []string
	auth    string
	header  map[string]string
	ct      string
	body    string
	chunked bool // send the body without a Content-Length
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (c call) request(t testing.TB, base string) *http.Request {
	t.Helper()
	method, path := c.method, c.path
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = "/pay"
	}
	var body io.Reader = strings.NewReader(c.body)
	if c.chunked {
		body = io.MultiReader(strings.NewReader(c.body))
	}
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.key != "" {
		req.Header.Set(idemhttp.HeaderKey, c.key)
	}
	for _, k := range c.keys {
		req.Header.Add(idemhttp.HeaderKey, k)
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	if c.ct != "" {
		req.Header.Set("Content-Type", c.ct)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	return req
}

// send makes the call to a test server.
func (c call) send(t testing.TB, srv *httptest.Server) response {
	t.Helper()
	res, err := srv.Client().Do(c.request(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// recorded is what a recorder got, as a response.
func recorded(rec *httptest.ResponseRecorder) response {
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

func serve(t *testing.T, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// checkProblem asserts that r is a problem response with status and code.
func checkProblem(t testing.TB, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	var p idemhttp.Problem
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Code != code || p.Status != status || p.Type != idemhttp.ProblemTypeBase+code || p.Title == "" || p.Detail == "" {
		t.Errorf("problem %+v, want code %q status %d with type, title and detail", p, code, status)
	}
}
