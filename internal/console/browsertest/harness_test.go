package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/store/memstore"
)

const adminToken = "console-test-token"

// upstream is a payment API that charges for every request it gets and
// counts the charges by tenant and key. For chosen keys it cuts the
// connection after the first charge, with no answer: the gateway cannot
// know whether the charge happened, and marks the key UNKNOWN. Its
// reconcile lookup (GET /lookup/{tenant}/{key}) finds the keys marked
// found and answers 409, "not known yet", for the others.
type upstream struct {
	*httptest.Server

	mu     sync.Mutex
	runs   map[string]int         // charges by tenant/key
	fences map[string]string      // the fence of each key's last charge
	cut    map[string]bool        // tenant/key: cut the first charge's connection
	found  map[string]bool        // tenant/key: the lookup answers 200
	broken map[string]bool        // tenant/key: the lookup answers 500
	answer map[string]http.Header // tenant/key: headers of its answer
	body   map[string]string      // tenant/key: the body of its answer
	hold   map[string]chan struct{}
	held   chan string // a charge of a held key has begun
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{runs: map[string]int{}, fences: map[string]string{}, cut: map[string]bool{}, found: map[string]bool{}, broken: map[string]bool{},
		answer: map[string]http.Header{}, body: map[string]string{}, hold: map[string]chan struct{}{}, held: make(chan string, 1)}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func id(tenant, key string) string { return tenant + "/" + key }

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	tenant, key := r.Header.Get("Idempotency-Tenant"), r.Header.Get(idemhttp.HeaderKey)
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/lookup/") {
		u.lookup(w, tenant, key)
		return
	}
	u.mu.Lock()
	u.runs[id(tenant, key)]++
	n := u.runs[id(tenant, key)]
	u.fences[id(tenant, key)] = r.Header.Get(gateway.FenceHeader)
	cut, hold := u.cut[id(tenant, key)] && n == 1, u.hold[key]
	header, body := u.answer[id(tenant, key)], u.body[id(tenant, key)]
	u.mu.Unlock()
	if hold != nil {
		u.held <- key
		<-hold
	}
	if cut { // charged; the answer never leaves
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
		return
	}
	for name, vs := range header {
		w.Header()[name] = vs
	}
	if body == "" {
		w.Header().Set("Content-Type", "application/json")
		body = fmt.Sprintf(`{"charge":%q,"run":%d}`, key, n)
	}
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, body)
}

func (u *upstream) lookup(w http.ResponseWriter, tenant, key string) {
	u.mu.Lock()
	found, broken, fence := u.found[id(tenant, key)], u.broken[id(tenant, key)], u.fences[id(tenant, key)]
	u.mu.Unlock()
	if broken {
		w.Header().Set(idemhttp.HeaderKey, key)
		http.Error(w, "the ledger is down", http.StatusInternalServerError)
		return
	}
	if !found {
		http.Error(w, "not settled yet", http.StatusConflict)
		return
	}
	w.Header().Set(idemhttp.HeaderKey, key)
	w.Header().Set(gateway.FenceHeader, fence)
	w.Header().Set("Idempotency-Tenant", tenant)
	w.Header().Set(gateway.OriginalStatusHeader, "201")
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"charge":%q,"found_by":"lookup"}`, key)
}

func (u *upstream) charges(tenant, key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.runs[id(tenant, key)]
}

// harness is a gateway in front of the upstream: clients reach it
// through proxy, the console through admin.
type harness struct {
	sent  atomic.Int64 // requests sent through the proxy
	up    *upstream
	g     *gateway.Gateway
	proxy string
	admin string
}

// newHarness builds the gateway, with the config edits given, and serves
// its proxy; the admin API starts with startAdmin.
func newHarness(t *testing.T, edits ...func(*gateway.Config)) *harness {
	up := newUpstream(t)
	store, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	cfg := gateway.Config{Listen: "127.0.0.1:0", Admin: "127.0.0.1:0", AdminToken: adminToken,
		Upstream: u, Store: store, TenantHeader: "X-Tenant", ReconcileURL: up.URL + "/lookup/{tenant}/{key}",
		Routes:     []gateway.Route{{Pattern: "/v1/charges", Name: "charges"}},
		StatsEvery: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	for _, edit := range edits {
		edit(&cfg)
	}
	g, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(g.Handler())
	t.Cleanup(proxy.Close)
	return &harness{up: up, g: g, proxy: proxy.URL}
}

// startAdmin runs the gateway: its admin API, and the samples of its
// counters from now on. Clients keep using the test's own proxy server,
// which ran first: keys made UNKNOWN before are in the first sample (the
// count of UNKNOWN keys is cached for 15 s).
func (h *harness) startAdmin(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan net.Addr, 1), make(chan error, 1)
	go func() { done <- h.g.Run(ctx, func(_, admin net.Addr) { ready <- admin }) }()
	select {
	case addr := <-ready:
		h.admin = "http://" + addr.String()
	case err := <-done:
		cancel()
		t.Fatalf("the gateway stopped before serving: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway Run: %v", err)
		}
	})
}

// charge sends one client request and returns its status, the
// Idempotent-Replayed header and the body.
func (h *harness) charge(t *testing.T, tenant, key, body string) (int, bool, string) {
	t.Helper()
	status, replayed, answer, err := h.send(tenant, key, body)
	if err != nil {
		t.Fatalf("POST %s/%s: %v", tenant, key, err)
	}
	return status, replayed, answer
}

// send is charge for a goroutine of the test's: it returns the error.
func (h *harness) send(tenant, key, body string) (int, bool, string, error) {
	h.sent.Add(1)
	req, _ := http.NewRequest(http.MethodPost, h.proxy+"/v1/charges", strings.NewReader(body))
	req.Header.Set("X-Tenant", tenant)
	req.Header.Set(idemhttp.HeaderKey, key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(b), err
}

// cutCharge sends a request whose answer the upstream cuts after
// charging: its key turns UNKNOWN. With retry, it checks that a retry is
// not run again; that retry asks the lookup, and a lookup that found
// nothing keeps its claim on the key for --reconcile-timeout + 2 s, in
// which nobody asks again.
func (h *harness) cutCharge(t *testing.T, tenant, key string, retry bool) {
	t.Helper()
	h.up.mu.Lock()
	h.up.cut[id(tenant, key)] = true
	h.up.mu.Unlock()
	if status, _, body := h.charge(t, tenant, key, `{"amount":100}`); status != http.StatusBadGateway {
		t.Fatalf("%s/%s: a cut connection answered %d %s; want 502 upstream_no_response", tenant, key, status, body)
	}
	if !retry {
		return
	}
	if status, _, body := h.charge(t, tenant, key, `{"amount":100}`); status != http.StatusServiceUnavailable || !strings.Contains(body, "outcome_unknown") {
		t.Fatalf("%s/%s: the retry of a cut request = %d %s; want 503 outcome_unknown", tenant, key, status, body)
	}
	if n := h.up.charges(tenant, key); n != 1 {
		t.Fatalf("%s/%s charged %d times; want once", tenant, key, n)
	}
}

// waitSampled waits until the ring of samples has one that counts every
// request sent so far.
func (h *harness) waitSampled(t *testing.T) {
	requests := float64(h.sent.Load())
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); <-tick.C {
		req, _ := http.NewRequest(http.MethodGet, h.admin+"/v1/stats", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Samples []struct{ Requests map[string]float64 }
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(st.Samples); n > 0 {
			total := 0.0
			for _, v := range st.Samples[n-1].Requests {
				total += v
			}
			if total >= requests {
				return
			}
		}
	}
	t.Fatalf("no sample counts %v requests after 10s", requests)
}
