package gateway

import (
	"bufio"
	"context"
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

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

func newTestGateway(t *testing.T, cfg Config) *Gateway {
	t.Helper()
	if cfg.Store == nil {
		s, err := memstore.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = s
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Admin == "" {
		cfg.Admin = testAdmin
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// readingCloser is an upstream that answers the first request on each
// connection and, on a connection's second request, reads it whole and
// closes the connection without answering: it may have acted on it.
type readingCloser struct {
	ln    net.Listener
	mu    sync.Mutex
	got   map[string]int // requests read, by Idempotency-Key (any case)
	conns sync.WaitGroup
}

func newReadingCloser(t *testing.T) *readingCloser {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &readingCloser{ln: ln, got: map[string]int{}}
	u.conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Go(func() { u.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); u.conns.Wait() })
	return u
}

func (u *readingCloser) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		u.mu.Lock()
		u.got[req.Header.Get("Idempotency-Key")]++
		u.mu.Unlock()
		if n == 2 {
			return // read, maybe acted on, never answered
		}
		fmt.Fprintf(c, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
	}
}

func (u *readingCloser) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got[key]
}

// http.Transport resends a bodiless request that carries an
// Idempotency-Key when a reused connection fails after the request was
// written. The gateway's transport must never do that: the upstream read
// the request.
func TestTransportNeverResendsARequestTheUpstreamRead(t *testing.T) {
	up := newReadingCloser(t)
	u, _ := url.Parse("http://" + up.ln.Addr().String())
	transport := NewUpstreamTransport()
	defer transport.CloseIdleConnections()
	g := newTestGateway(t, Config{Upstream: u, Transport: transport})
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	send := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/x", nil) // no body: what the Transport counts as replayable
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer c")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if status := send("first"); status != http.StatusCreated {
		t.Fatalf("first request: %d", status)
	}
	status := send("second") // on the kept-alive connection, which the upstream closes after reading
	if n := up.count("second"); n != 1 {
		t.Fatalf("the upstream read the request %d times; want 1 (the transport resent it)", n)
	}
	if status < 500 {
		t.Fatalf("a request the upstream read and never answered got %d; want a 5xx", status)
	}
	// Go's own Transport does resend it: the case above is the one that
	// matters.
	plain := NewUpstreamTransport()
	defer plain.CloseIdleConnections()
	for _, key := range []string{"plain-1", "plain-2"} {
		req, _ := http.NewRequest(http.MethodPost, u.String()+"/x", nil)
		req.Header.Set("Idempotency-Key", key)
		if resp, err := plain.RoundTrip(req); err == nil {
			io.Copy(io.Discard, resp.Body) // read to the end: the connection goes back to the pool
			resp.Body.Close()
		}
	}
	if n := up.count("plain-2"); n != 2 {
		t.Fatalf("Go's Transport sent plain-2 %d times; this test expects it to resend (2), or it tests nothing", n)
	}
}

func TestTenantSources(t *testing.T) {
	req := func(hdr ...string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		return r
	}
	tenant := func(specs string, anonymous bool, r *http.Request) (string, error) {
		t.Helper()
		sources, err := parseTenantSources(strings.Split(specs, ","))
		if err != nil {
			t.Fatal(err)
		}
		return tenantFunc(sources, anonymous)(r)
	}
	// One Authorization source keeps idemhttp's default tenant, so keys
	// stored before --tenant-from still replay.
	// Both come from internal/httpwire; this holds them to it.
	for _, auth := range []*http.Request{req("Authorization", "Bearer alice"), req("Authorization", "a", "Authorization", "bc")} {
		got, err := tenant("authorization", false, auth)
		if err != nil || got != defaultTenant(t, auth) {
			t.Fatalf("authorization tenant %q, %v; want idemhttp's default %q", got, err, defaultTenant(t, auth))
		}
	}
	// One header keeps --tenant-header's: the value itself.
	if got, err := tenant("header:x-tenant-id", false, req("X-Tenant-Id", "acme")); got != "acme" || err != nil {
		t.Fatalf("header tenant %q, %v; want acme", got, err)
	}
	seen := map[string]string{}
	for name, r := range map[string]*http.Request{
		"alice cookie":      req("Cookie", "session=alice"),
		"bob cookie":        req("Cookie", "session=bob"),
		"alice auth":        req("Authorization", "alice"),
		"auth and cookie":   req("Authorization", "alice", "Cookie", "session=alice"),
		"other cookie name": req("Cookie", "sess=alice"),
	} {
		got, err := tenant("authorization,cookie:session", false, r)
		if name == "other cookie name" {
			if !errorsIsMissing(err) {
				t.Errorf("%s: %q, %v; want ErrTenantMissing", name, got, err)
			}
			continue
		}
		if err != nil || got == "" || got == "alice" {
			t.Errorf("%s: tenant %q, %v; want a hash", name, got, err)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s share a tenant", name, other)
		}
		seen[got] = name
	}
	for _, r := range []*http.Request{req(), req("Authorization", ""), req("Cookie", "session=")} {
		if _, err := tenant("authorization,cookie:session", false, r); !errorsIsMissing(err) {
			t.Errorf("request without credentials %v: %v; want ErrTenantMissing", r.Header, err)
		}
		if got, err := tenant("authorization,cookie:session", true, r); got != "" || err != nil {
			t.Errorf("anonymous allowed: %q, %v; want the shared empty tenant", got, err)
		}
	}
	if _, err := tenant("cookie:session", false, req("Cookie", "session=a; session=b")); err == nil || errorsIsMissing(err) {
		t.Errorf("a cookie sent twice: %v; want an error", err)
	}
	for _, bad := range []string{"", "cookie", "header:", "header:a b", "jwt", "authorization:x", "cookie:s,cookie:s"} {
		if _, err := parseTenantSources(strings.Split(bad, ",")); err == nil {
			t.Errorf("--tenant-from %q accepted", bad)
		}
	}
}

func errorsIsMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), idemhttp.ErrTenantMissing.Error())
}

// defaultTenant is the tenant idemhttp's default Tenant gives r: the
// middleware is run with it and a recording store.
func defaultTenant(t *testing.T, r *http.Request) string {
	t.Helper()
	s, _ := memstore.New(nil)
	engine, err := idem.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.New(engine, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tenant string
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, _ := idem.LeaseFromContext(r.Context())
		tenant = l.ID().Tenant
	}))
	r = r.Clone(context.Background())
	r.Header.Set("Idempotency-Key", "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	return tenant
}

func TestAdminExposure(t *testing.T) {
	for addr, loopback := range map[string]bool{"127.0.0.1:9090": true, "localhost:9090": true, "[::1]:9090": true,
		"0.0.0.0:9090": false, ":9090": false, "[::]:9090": false, "10.0.0.1:9090": false, "admin.internal:9090": false, "junk": false} {
		if got := isLoopback(addr); got != loopback {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
		err := checkAdmin(Config{Admin: addr})
		if (err == nil) != loopback {
			t.Errorf("admin on %s without a token: %v", addr, err)
		}
		if err := checkAdmin(Config{Admin: addr, AdminToken: adminToken}); err != nil {
			t.Errorf("admin on %s with a token: %v", addr, err)
		}
		// --admin-insecure allows a network address without a token, and
		// is refused where it allows nothing: on loopback, which needs no
		// token, and with a token or client certificates.
		err = checkAdmin(Config{Admin: addr, AdminInsecure: true})
		if (err == nil) == loopback || loopback && !strings.Contains(err.Error(), "--admin-insecure has no effect: --admin listens on loopback "+addr) {
			t.Errorf("admin on %s with --admin-insecure: %v", addr, err)
		}
		for flag, cfg := range map[string]Config{"--admin-token": {AdminToken: adminToken}, "--admin-tokens-file": {AdminTokensFile: "/x"},
			"--admin-client-ca": {AdminClientCA: "/x"}} {
			cfg.Admin, cfg.AdminInsecure = addr, true
			if err := checkAdmin(cfg); err == nil || !strings.Contains(err.Error(), "--admin-insecure has no effect: "+flag+" is set") {
				t.Errorf("admin on %s with --admin-insecure and %s: %v", addr, flag, err)
			}
		}
	}
	if err := checkAdmin(Config{AdminInsecure: true}); err == nil || !strings.Contains(err.Error(), "--admin-insecure has no effect: --admin is empty") {
		t.Errorf("no admin API, with --admin-insecure: %v", err)
	}
}

// At its bound the listener closes an idle keep-alive connection to let a
// new client in, and never has more connections open than the bound.
func TestConnLimiterEvictsIdleConnectionsAtTheBound(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const bound = 4
	// Open connections are counted at the socket: a connection counts from
	// its accept until its Close returns, which the limiter's slot waits
	// for. (The server's ConnState reports an evicted connection's close
	// later, from that connection's own goroutine, so counting there would
	// see a new connection before the evicted one's close.)
	counted := &countingListener{Listener: tcp}
	ln := newConnLimiter(counted, bound)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	srv.ConnState = ln.track
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		<-done
	}()
	// bound idle keep-alive clients, each with its own connection.
	var clients []*http.Transport
	get := func(tr *http.Transport) error {
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		resp, err := c.Get("http://" + tcp.Addr().String())
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	for range bound + 3 { // more clients than the bound, each then idle
		tr := &http.Transport{}
		clients = append(clients, tr)
		if err := get(tr); err != nil {
			t.Fatalf("client %d at the bound: %v (idle connections were not evicted)", len(clients), err)
		}
	}
	for _, tr := range clients {
		tr.CloseIdleConnections()
	}
	if p := counted.peak.Load(); p > bound {
		t.Fatalf("%d connections open at once; bound %d", p, bound)
	}
}

// countingListener counts the connections it accepted and that are not
// closed yet, and the most open at once.
type countingListener struct {
	net.Listener
	open, peak atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
	}
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// A transport other than *http.Transport may not report its writes
// through httptrace: a request it failed may have reached the upstream,
// so the key turns UNKNOWN and the retry is not sent again.
func TestUntracedTransportFailureIsUnknown(t *testing.T) {
	var calls atomic.Int32
	up := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		calls.Add(1)
		return nil, io.ErrUnexpectedEOF
	})
	u, _ := url.Parse("http://upstream.test")
	g := newTestGateway(t, Config{Upstream: u, Transport: up})
	send := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", "untraced-1")
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		g.Handler().ServeHTTP(rec, req)
		return rec
	}
	if rec := send(); rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), CodeUpstreamNoResponse) {
		t.Fatalf("first: %d %s; want 502 %s", rec.Code, rec.Body, CodeUpstreamNoResponse)
	}
	if rec := send(); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "outcome_unknown") {
		t.Fatalf("retry: %d %s; want 503 outcome_unknown", rec.Code, rec.Body)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the upstream was called %d times; want 1", n)
	}
}
