package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"go.uber.org/goleak"
)

var binary string // the idem binary the end-to-end tests run

func TestMain(m *testing.M) {
	if role := os.Getenv(helperEnv); role != "" {
		os.Exit(runConnHelper(role)) // this process is a swarm of slow clients (slowclients_e2e_test.go)
	}
	dir, err := os.MkdirTemp("", "idem-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "idem")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building idem: %v\n%s", err, out)
		os.Exit(1)
	}
	code := 0
	func() {
		defer os.RemoveAll(dir)
		code = m.Run()
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
			}
		}
	}()
	os.Exit(code)
}

// upstream is a test API behind the gateway: it counts executions per key
// and records the fence it was sent.
type upstream struct {
	*httptest.Server
	mu     sync.Mutex
	calls  map[string]int
	fences map[string][]string
	delay  time.Duration
	seen   chan string // one value per call that started, if not nil
}

func newUpstream(t *testing.T, delay time.Duration) *upstream {
	u := &upstream{calls: map[string]int{}, fences: map[string][]string{}, delay: delay}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.calls[key]++
		n := u.calls[key]
		u.fences[key] = append(u.fences[key], r.Header.Get("Idempotency-Fence"))
		seen := u.seen
		u.mu.Unlock()
		if seen != nil {
			seen <- key
		}
		time.Sleep(u.delay)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "session=secret")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"execution":%d,"echo":%q,"hop":%q}`, key, n, body, r.Header.Get("X-Hop"))
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[key]
}

// gatewayProc is one `idem serve` process.
type gatewayProc struct {
	cmd   *exec.Cmd
	addr  string
	admin string
	done  chan error
	ready chan struct{} // closed once it serves (addr and admin are set)
	mu    sync.Mutex    // guards logs
	logs  *bytes.Buffer
}

// startGateway starts idem serve on free ports, logging JSON, with args,
// and waits until it serves.
func startGateway(t *testing.T, args ...string) *gatewayProc {
	t.Helper()
	g := launchServe(t, nil, append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	g.waitServing(t)
	return g
}

// launchServe starts `idem serve args...`, with env added to this
// process's environment (less IDEM_ADMIN_TOKEN), and stops it when t
// ends. Its log must be JSON lines: waitServing reads the addresses from
// the "idem: serving" line.
func launchServe(t *testing.T, env []string, args ...string) *gatewayProc {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve"}, args...)...)
	cmd.Env = append(withoutEnv("IDEM_ADMIN_TOKEN"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{cmd: cmd, done: make(chan error, 1), logs: &bytes.Buffer{}, ready: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Bytes()
			g.mu.Lock()
			g.logs.Write(line)
			g.logs.WriteByte('\n')
			g.mu.Unlock()
			var ev struct{ Msg, Listen, Admin string }
			if json.Unmarshal(line, &ev) == nil && ev.Msg == "idem: serving" {
				g.addr, g.admin = ev.Listen, ev.Admin
				close(g.ready)
			}
		}
		g.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			// A connection the client dialed but never used would hold up the
			// gateway's graceful shutdown for 5s (net/http waits that long
			// for a new connection's first request).
			http.DefaultClient.CloseIdleConnections()
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-g.done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-g.done
			}
		}
	})
	return g
}

// waitServing waits until the gateway serves, failing the test if it
// exits or 20 s pass first.
func (g *gatewayProc) waitServing(t *testing.T) {
	t.Helper()
	select {
	case <-g.ready:
	case err := <-g.done:
		t.Fatalf("idem serve %v exited before serving: %v\n%s", g.cmd.Args[1:], err, g.logText())
	case <-time.After(20 * time.Second):
		g.cmd.Process.Kill()
		t.Fatalf("idem serve did not start:\n%s", g.logText())
	}
}

// withoutEnv returns this process's environment without the variable name.
func withoutEnv(name string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, name+"=") {
			env = append(env, kv)
		}
	}
	return env
}

// stop sends SIGTERM and returns the exit error.
func (g *gatewayProc) stop(t *testing.T) error {
	t.Helper()
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-g.done:
		return err
	case <-time.After(20 * time.Second):
		g.cmd.Process.Kill()
		t.Fatal("gateway did not stop on SIGTERM")
		return nil
	}
}

type answer struct {
	status   int
	replayed bool
	body     string
	header   http.Header
}

func post(t *testing.T, base, key, body string, hdr ...string) answer {
	t.Helper()
	a, err := tryPost(base, key, body, hdr...)
	if err != nil {
		t.Errorf("POST %s: %v", base, err)
	}
	return a
}

// tryPost is post for a request that may get no answer (its gateway dies
// or stalls): the error is returned, not reported. hdr holds header
// name/value pairs; an empty value removes the header.
func tryPost(base, key, body string, hdr ...string) (answer, error) {
	return tryPostWith(http.DefaultClient, base, key, body, hdr...)
}

// tryPostWith is tryPost with client (e.g. one with a timeout).
func tryPostWith(client *http.Client, base, key, body string, hdr ...string) (answer, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/charges", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Authorization", "Bearer e2e-client") // the gateway refuses anonymous clients; hdr may unset it
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(b), resp.Header}, nil
}

// storeURIs are the stores the end-to-end tests run on.
func storeURIs(t *testing.T) map[string]string {
	testenv.Redis(t) // fails under CI, skips elsewhere, when Redis is down
	testenv.Postgres(t)
	return map[string]string{
		"memory":   "memory",
		"redis":    testenv.RedisURL(),
		"postgres": testenv.DatabaseURL(),
		"layered":  testenv.RedisURL() + "+" + testenv.DatabaseURL(),
	}
}

func TestBurstExecutesOnce(t *testing.T) {
	for name, uri := range storeURIs(t) {
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t, 200*time.Millisecond)
			g := startGateway(t, "--upstream", up.URL, "--store", uri)
			key := "burst-" + testenv.Prefix(t)
			var wg sync.WaitGroup
			answers := make([]answer, 50)
			for i := range answers {
				wg.Go(func() { answers[i] = post(t, "http://"+g.addr, key, `{"amount":100}`) })
			}
			wg.Wait()
			// The invariant, not an arrival order: one execution, one first
			// answer; every other answer is a 409 (it came while the upstream
			// ran) or the first answer replayed (it came after), never a
			// second execution. How many are which depends on the scheduler.
			if n := up.count(key); n != 1 {
				t.Fatalf("upstream ran %d times; want 1", n)
			}
			var first *answer
			counts := map[string]int{}
			for i, a := range answers {
				switch {
				case a.status == 201 && !a.replayed:
					counts["executed"]++
					first = &answers[i]
				case a.status == 201 && a.replayed:
					counts["replayed"]++
				case a.status == 409 && strings.Contains(a.body, "key_in_flight"):
					counts["409"]++
				default:
					t.Errorf("answer %d %q replayed=%v; want 201, a replayed 201 or a 409 key_in_flight", a.status, a.body, a.replayed)
				}
			}
			if counts["executed"] != 1 || counts["replayed"]+counts["409"] != len(answers)-1 {
				t.Fatalf("answers %v; want one executed 201, the other %d a 409 or a replay", counts, len(answers)-1)
			}
			for _, a := range answers {
				if a.replayed && a.body != first.body {
					t.Fatalf("replay %q differs from the first answer %q", a.body, first.body)
				}
			}
			t.Logf("answers %v", counts)
			a := post(t, "http://"+g.addr, key, `{"amount":100}`)
			if a.status != 201 || !a.replayed || a.header.Get("Set-Cookie") != "" || up.count(key) != 1 {
				t.Fatalf("retry after the burst = %d replayed=%v set-cookie=%q (runs %d); want the 201 replayed without cookies",
					a.status, a.replayed, a.header.Get("Set-Cookie"), up.count(key))
			}
			if f := up.fences[key]; len(f) != 1 || f[0] == "" {
				t.Fatalf("upstream got fences %q; want one Idempotency-Fence", f)
			}
		})
	}
}

func TestReplayAcrossRestartAndGateways(t *testing.T) {
	t.Parallel() // mostly waiting; its gateway, upstream and keys are its own
	for name, uri := range storeURIs(t) {
		if name != "memory" {
			t.Run(name, func(t *testing.T) { testSharedStore(t, uri) })
		}
	}
}

func testSharedStore(t *testing.T, uri string) {
	up := newUpstream(t, 100*time.Millisecond)
	g1 := startGateway(t, "--upstream", up.URL, "--store", uri)
	g2 := startGateway(t, "--upstream", up.URL, "--store", uri)
	key := "shared-" + testenv.Prefix(t)
	var wg sync.WaitGroup
	for i := range 40 {
		addr := g1.addr
		if i%2 == 1 {
			addr = g2.addr
		}
		wg.Go(func() { post(t, "http://"+addr, key, `{"amount":7}`) })
	}
	wg.Wait()
	if n := up.count(key); n != 1 {
		t.Fatalf("two gateways on one Redis ran the key %d times; want 1", n)
	}
	first := post(t, "http://"+g1.addr, key, `{"amount":7}`)
	if err := g1.stop(t); err != nil {
		t.Fatalf("gateway exit after SIGTERM: %v", err)
	}
	g3 := startGateway(t, "--upstream", up.URL, "--store", uri)
	again := post(t, "http://"+g3.addr, key, `{"amount":7}`)
	if !again.replayed || again.body != first.body || up.count(key) != 1 {
		t.Fatalf("after a restart: replayed=%v body=%q (runs %d); want the same body replayed", again.replayed, again.body, up.count(key))
	}
}

func TestAdminAPI(t *testing.T) {
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL, "--admin-token", "s3cret-admin-token", "--tenant-header", "X-Tenant-ID")
	post(t, "http://"+g.addr, "order/1", `{"amount":1}`, "X-Tenant-ID", "acme")
	call := func(method, path, token string) (int, string) { return adminCall(t, g, method, path, token, "") }
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := call("GET", p, ""); code != 200 {
			t.Errorf("GET %s = %d; want 200", p, code)
		}
	}
	if code, body := call("GET", "/metrics", ""); code != 200 || !strings.Contains(body, `idem_requests_total{outcome="executed",route=""} 1`) {
		t.Errorf("GET /metrics = %d, executed counter missing:\n%.2000s", code, body)
	}
	if code, _ := call("GET", "/v1/keys/acme/order%2F1", ""); code != 401 {
		t.Errorf("key API without the token = %d; want 401", code)
	}
	code, body := call("GET", "/v1/keys/acme/order%2F1", "s3cret-admin-token")
	if code != 200 || !strings.Contains(body, `"state":"COMPLETED"`) || strings.Contains(body, "owner") {
		t.Fatalf("GET key = %d %s; want the COMPLETED record without its owner token", code, body)
	}
	if code, _ := call("DELETE", "/v1/keys/acme/order%2F1", "s3cret-admin-token"); code != 204 {
		t.Fatalf("DELETE key = %d; want 204", code)
	}
	if code, _ := call("GET", "/v1/keys/acme/order%2F1", "s3cret-admin-token"); code != 404 {
		t.Fatalf("GET deleted key = %d; want 404", code)
	}
	if a := post(t, "http://"+g.addr, "order/1", `{"amount":1}`, "X-Tenant-ID", "acme"); a.replayed || up.count("order/1") != 2 {
		t.Fatalf("after invalidation: replayed=%v runs=%d; want a fresh execution", a.replayed, up.count("order/1"))
	}
}

func TestSIGTERMLetsInFlightRequestsFinish(t *testing.T) {
	up := newUpstream(t, 500*time.Millisecond)
	up.seen = make(chan string, 10)
	g := startGateway(t, "--upstream", up.URL)
	var wg sync.WaitGroup
	answers := make([]answer, 10)
	for i := range answers {
		wg.Go(func() { answers[i] = post(t, "http://"+g.addr, fmt.Sprintf("drain-%d", i), `{}`) })
	}
	for range answers {
		<-up.seen
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM with requests in flight: %v; want 0", err)
	}
	wg.Wait()
	for i, a := range answers {
		if a.status != 201 {
			t.Errorf("request %d during shutdown = %d; want 201", i, a.status)
		}
	}
}

func TestUpstreamFailures(t *testing.T) {
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + dead.Addr().String()
	dead.Close()
	g := startGateway(t, "--upstream", deadURL)
	for range 2 { // the second attempt runs again: the key was released
		a := post(t, "http://"+g.addr, "k-unreachable", `{}`)
		if a.status != 502 || a.header.Get("Content-Type") != "application/problem+json" || !strings.Contains(a.body, "upstream_unreachable") {
			t.Fatalf("unreachable upstream = %d %s %s; want a 502 problem", a.status, a.header.Get("Content-Type"), a.body)
		}
	}
	// A request sent and not answered in time may have taken effect: the
	// key turns UNKNOWN and the retry does not send it again.
	slow := newUpstream(t, 2*time.Second)
	g = startGateway(t, "--upstream", slow.URL, "--upstream-timeout", "200ms")
	if a := post(t, "http://"+g.addr, "k-slow", `{}`); a.status != 504 || !strings.Contains(a.body, "upstream_timeout") {
		t.Fatalf("slow upstream = %d %s; want a 504 problem", a.status, a.body)
	}
	// Without a reconcile URL only an operator settles the key: no
	// Retry-After invites a retry that cannot help (issue 32 item 7).
	if a := post(t, "http://"+g.addr, "k-slow", `{}`); a.status != 503 || !strings.Contains(a.body, "outcome_unknown") || a.header.Get("Retry-After") != "" {
		t.Fatalf("retry after a timeout = %d %s (Retry-After %q); want a 503 outcome_unknown problem without Retry-After", a.status, a.body, a.header.Get("Retry-After"))
	}
	if n := slow.count("k-slow"); n != 1 {
		t.Fatalf("slow upstream ran %d times; want 1", n)
	}
}

func TestProxyHygiene(t *testing.T) {
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL)
	// Hop-by-hop headers, and headers named in Connection, stop at the proxy;
	// a client cannot forge the fence.
	a := post(t, "http://"+g.addr, "hop", `{}`, "Connection", "X-Hop", "X-Hop", "secret", "Idempotency-Fence", "999999999999999999")
	if a.status != 201 || strings.Contains(a.body, "secret") {
		t.Fatalf("answer %d %s; want 201 without the X-Hop header forwarded", a.status, a.body)
	}
	if f := up.fences["hop"]; len(f) != 1 || f[0] == "999999999999999999" {
		t.Fatalf("upstream fence %q; want the lease's, not the client's", f)
	}
	// Request smuggling. Conflicting Content-Length values are refused.
	// Content-Length with Transfer-Encoding is handled as RFC 9112 tells an
	// intermediary to: chunked framing wins, Content-Length is dropped and the
	// request is framed anew for the upstream, so the two hops can never
	// disagree on where the request ends: the upstream gets an empty body,
	// not the bytes hidden behind the chunked terminator.
	raw := func(req string) *http.Response {
		conn, err := net.Dial("tcp", g.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write([]byte(req))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("reading the answer to %q: %v", req, err)
		}
		return resp
	}
	if resp := raw("POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer c\r\nIdempotency-Key: smuggle\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nbody"); resp.StatusCode != 400 {
		t.Fatalf("conflicting Content-Length answered %d; want 400", resp.StatusCode)
	}
	if n := up.count("smuggle"); n != 0 {
		t.Fatalf("upstream saw a request with conflicting Content-Length %d times", n)
	}
	resp := raw("POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer c\r\nIdempotency-Key: clte\r\nContent-Length: 30\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nPOST /smuggled HTTP/1.1\r\n\r\n")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || !strings.Contains(string(body), `"echo":""`) {
		t.Fatalf("CL+TE request answered %d %s; want the chunked (empty) body forwarded alone", resp.StatusCode, body)
	}
	// RFC 9112 §6.3: the server MUST close the connection after such a request.
	if !resp.Close {
		t.Fatalf("CL+TE request answered without Connection: close (header %q)", resp.Header.Get("Connection"))
	}
	if n := up.count("smuggle"); n != 0 {
		t.Fatalf("upstream saw a smuggling request %d times", n)
	}
}

func TestBadInvocations(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"serve"}, "--upstream must be"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "mongodb://x"}, "bad store URI"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "redis://:pw@127.0.0.1:notaport"}, "--store"},
		// Empty, these would mean the library's defaults (go-redis, no
		// coalescing), not idem serve's: refused instead, quoting the URL
		// as written, without the defaults idem serve adds to its query.
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "redis://127.0.0.1:1/0?client="}, `"redis://127.0.0.1:1/0?client=": client= is empty`},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "redis://127.0.0.1:1/0?coalesce="}, `"redis://127.0.0.1:1/0?coalesce=": coalesce= is empty`},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "redis://127.0.0.1:1/0?near_cache="}, `"redis://127.0.0.1:1/0?near_cache=": near_cache= is empty`},
		// On the gateway's default client, rueidis: quoted as written, not re-encoded in sorted order.
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "redis://127.0.0.1:1/0?read_timeout=1s&pool_size=3"}, `"redis://127.0.0.1:1/0?read_timeout=1s&pool_size=3": pool_size is a go-redis pool option`},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "redis://127.0.0.1:1/0?coalesce=on&coalesce=off"}, "coalesce is given 2 times"},
		// A pair go-redis cannot parse would be dropped, and the gateway's defaults with it.
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "redis://127.0.0.1:1/0?pool_size=3;x=1"}, `"redis://127.0.0.1:1/0?pool_size=3;x=1": query: invalid semicolon separator in query`},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--max-body", "lots"}, "max-body"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--error-format", "xml"}, "--error-format"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--mismatch-status", "200"}, "--mismatch-status"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store-timeout", "0s"}, "--store-timeout"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--memory-tenant-share", "0"}, "--memory-tenant-share"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--memory-tenant-share", "0.5", "--store", "redis://127.0.0.1:1"}, "memory store only"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--replay-headers", "Request-Id,Set-Cookie"}, "Set-Cookie"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--reconcile-rate", "0"}, "--reconcile-rate"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--reconcile-concurrency", "0"}, "--reconcile-concurrency"},
		// Accepted by --check-config, these once made serve exit 1 (a
		// restart loop under systemd) or serve something else than they
		// say: both refuse them with 2.
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--listen", "nonsense"}, "--listen"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:99999"}, "--listen"},
		{[]string{"serve", "--check-config", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:99999"}, "--listen"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--admin", "127.0.0.1:99999"}, "--admin"},
		{[]string{"serve", "--check-config", "--upstream", "http://127.0.0.1:1", "--admin", "127.0.0.1:99999"}, "--admin"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--listen", ""}, "--listen is empty"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--upstream-timeout", "-1s"}, "--upstream-timeout"},
		{[]string{"serve", "--check-config", "--upstream", "http://127.0.0.1:1", "--lease", "0"}, "--lease"},
		{[]string{"serve", "--check-config", "--upstream", "http://127.0.0.1:1", "--methods", ""}, "--methods"},
		{[]string{"frobnicate"}, "unknown command"},
	} {
		// Bounded: a value that is not refused can start a gateway that
		// waits for its store, and would hang the test.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, binary, c.args...).CombinedOutput()
		cancel()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("idem %v: exit %v, output %q; want exit 2 mentioning %q", c.args, err, out, c.want)
		}
		if strings.Contains(string(out), ":pw@") {
			t.Errorf("idem %v echoed a password: %s", c.args, out)
		}
	}
	// Issue 22, item 12: an admin token that is given but blank would
	// leave the key API open (empty) or shut for good (white space).
	// A gateway that starts is killed after 10 s (the test fails then).
	serve := func(env string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary, append([]string{"serve", "--upstream", "http://127.0.0.1:1",
			"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, args...)...)
		cmd.Env = append(withoutEnv("IDEM_ADMIN_TOKEN"), env)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// One too short to be a secret (16 bytes) is refused too, unquoted.
	for _, token := range []string{"", " ", "\t", "s3cret"} {
		for _, how := range [][]string{{"", "--admin-token", token}, {"IDEM_ADMIN_TOKEN=" + token}} {
			out, err := serve(how[0], how[1:]...)
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(out, "--admin-token") ||
				(strings.TrimSpace(token) != "" && strings.Contains(out, token)) {
				t.Errorf("idem serve %q: exit %v, output %q; want exit 2 naming --admin-token, not the token", how, err, out)
			}
		}
	}
	cmd := exec.Command(binary, "serve")
	cmd.Env = append(os.Environ(), "IDEM_LEASE=soon")
	if out, _ := cmd.CombinedOutput(); !strings.Contains(string(out), "IDEM_LEASE") {
		t.Errorf("a bad IDEM_LEASE was not named: %s", out)
	}
	out, err := exec.Command(binary, "help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "serve") || !strings.Contains(string(out), "demo") {
		t.Errorf("idem help = %v %s", err, out)
	}
}

func TestDemoShowsOneChargePerKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "demo", "--keys", "5", "--burst", "10", "--retries", "2", "--latency", "50ms").CombinedOutput()
	if err != nil {
		t.Fatalf("idem demo: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "exactly one charge per key") {
		t.Fatalf("demo output:\n%s", out)
	}
}

func TestProbePassesAgainstTheGateway(t *testing.T) {
	up := newUpstream(t, 50*time.Millisecond)
	g := startGateway(t, "--upstream", up.URL, "--require-key")
	out, err := exec.Command(binary, "probe", "--header", "Authorization: Bearer carol", // the gateway refuses anonymous clients
		"--credential", "Bearer alice", "--credential2", "Bearer bob", "http://"+g.addr+"/charges").CombinedOutput()
	if err != nil || strings.Contains(string(out), "FAIL") {
		t.Fatalf("idem probe against idem serve: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "PASS") {
		t.Fatalf("probe printed no passing check:\n%s", out)
	}
	// The probe exits 1 against an API that ignores the key.
	naive := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%q}`, time.Now().String())
	}))
	defer naive.Close()
	out, err = exec.Command(binary, "probe", naive.URL).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "FAIL") {
		t.Fatalf("probe against an API without idempotency: %v\n%s; want FAIL lines and exit 1", err, out)
	}
	out, err = exec.Command(binary, "probe", "http://192.0.2.1/charges").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "i-own-this-target") {
		t.Fatalf("probe of a remote target without --i-own-this-target: %v\n%s", err, out)
	}
}

func TestLabCommand(t *testing.T) {
	out, err := exec.Command(binary, "lab", "--list").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "stall-before") || !strings.Contains(string(out), "failover") {
		t.Fatalf("idem lab --list: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "lab", "--scenarios", "nope").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 || !strings.Contains(string(out), "nope") {
		t.Fatalf("idem lab with an unknown scenario: %v\n%s", err, out)
	}
}
