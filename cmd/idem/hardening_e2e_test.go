package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// metric returns the value of a sample of the gateway's /metrics, -1 when
// it is absent.
func (g *gatewayProc) metric(t *testing.T, sample string) float64 {
	t.Helper()
	body := g.metrics(t)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("metric %s: %v", sample, err)
	}
	return v
}

func (g *gatewayProc) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + g.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// logText returns what the gateway logged so far.
func (g *gatewayProc) logText() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.logs.String()
}

// Finding 1 of issue 13: a body's announced length was allocated before
// any of it arrived. 500 connections announcing 1 MiB and 20 announcing
// 100 MiB (under --max-body 100MiB) that send headers only must grow the
// heap by less than 64 MiB; they grew it by 531 MB and 2.1 GB before.
func TestAnnouncedBodiesAllocateNothing(t *testing.T) {
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL, "--max-body", "100MiB")
	heapBefore := g.metric(t, "go_memstats_heap_alloc_bytes")
	goroutines := g.metric(t, "go_goroutines")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	announce := func(n int, length int64) {
		for i := range n {
			c, err := net.Dial("tcp", g.addr)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			fmt.Fprintf(c, "POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nIdempotency-Key: big-%d-%d\r\nContent-Length: %d\r\n\r\n", length, i, length)
		}
	}
	announce(500, 1<<20)
	announce(20, 100<<20)
	// Every connection is being served once its goroutine exists; the
	// heap is then sampled for a while, and the largest value counts: an
	// allocation on the client's word would show at once.
	deadline := time.Now().Add(20 * time.Second)
	for g.metric(t, "go_goroutines") < goroutines+float64(len(conns)) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway serves %v goroutines; want %v", g.metric(t, "go_goroutines"), goroutines+float64(len(conns)))
		}
		time.Sleep(10 * time.Millisecond) // polling a real server's metric
	}
	peak := 0.0
	for range 20 {
		peak = max(peak, g.metric(t, "go_memstats_heap_alloc_bytes"))
		time.Sleep(50 * time.Millisecond) // sampling the real server's heap over a second
	}
	growth := (peak - heapBefore) / (1 << 20)
	t.Logf("heap %.1f MiB before, %.1f MiB at most with 520 connections announcing 1 MiB or 100 MiB: growth %.1f MiB",
		heapBefore/(1<<20), peak/(1<<20), growth)
	if growth >= 64 {
		t.Fatalf("heap grew by %.1f MiB for bodies that never came; want under 64 MiB", growth)
	}
	// The server still answers while they wait.
	if a := post(t, "http://"+g.addr, "normal", `{}`); a.status != 201 {
		t.Fatalf("normal request next to 520 announced bodies = %d %s", a.status, a.body)
	}
}

// Finding 2: a slow body and an idle keep-alive connection are closed by
// the server after --read-timeout and --idle-timeout.
func TestSlowAndIdleConnectionsAreClosed(t *testing.T) {
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL, "--read-timeout", "1s", "--idle-timeout", "1s")
	closedWithin := func(c net.Conn, limit time.Duration) time.Duration {
		start := time.Now()
		c.SetReadDeadline(start.Add(limit))
		// io.Copy returns when the server closes: nil on its FIN, or a reset
		// when bytes the client dribbled were still unread in the server's
		// socket as it closed (the kernel answers those with RST). Only the
		// read deadline means the connection was kept open.
		_, err := io.Copy(io.Discard, c)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the server kept the connection open for %v: %v", limit, err)
		}
		return time.Since(start)
	}
	slow, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nIdempotency-Key: slow\r\nContent-Length: 100\r\n\r\n{")
	go func() { // a byte every 200ms: the body would take 20s
		for range 100 {
			time.Sleep(200 * time.Millisecond)
			if _, err := slow.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	took := closedWithin(slow, 10*time.Second)
	t.Logf("a dribbled body was cut after %v (--read-timeout 1s)", took.Round(time.Millisecond))
	if up.count("slow") != 0 {
		t.Fatal("the upstream got the dribbled request")
	}

	idle, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	fmt.Fprintf(idle, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	start := time.Now()
	idle.SetReadDeadline(start.Add(10 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive connection: %v; want closed by the server", err)
	}
	t.Logf("an idle keep-alive connection was closed after %v (--idle-timeout 1s)", time.Since(start).Round(time.Millisecond))
}

// Finding 3: a full memory store refuses new keys with 503 store_full (a
// metric and a warning) and still replays every key it stored; --fail-open
// does not run new keys unprotected.
func TestFullMemoryStoreRefusesNewKeysAndReplays(t *testing.T) {
	big := strings.Repeat("x", 8<<10)
	var mu sync.Mutex
	calls := map[string]int{}
	count := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[key]
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, r.Header.Get("Idempotency-Key")+big)
	}))
	defer up.Close()
	g := startGateway(t, "--upstream", up.URL, "--memory-limit", "256KiB", "--fail-open")
	var stored []string
	for i := 0; ; i++ {
		key := fmt.Sprintf("fill-%d", i)
		a := post(t, "http://"+g.addr, key, `{}`)
		if a.status == 503 {
			if !strings.Contains(a.body, `"code":"store_full"`) {
				t.Fatalf("full store answered %s; want store_full", a.body)
			}
			if count(key) != 0 {
				t.Fatalf("the refused key reached the upstream (--fail-open ran it unprotected)")
			}
			break
		}
		if a.status != 201 || a.replayed {
			t.Fatalf("key %s: %d replayed=%v", key, a.status, a.replayed)
		}
		stored = append(stored, key)
		if i > 1000 {
			t.Fatal("a 256 KiB store took 1,000 results of 8 KiB")
		}
	}
	for _, key := range stored {
		a := post(t, "http://"+g.addr, key, `{}`)
		if a.status != 201 || !a.replayed || a.body != key+big {
			t.Fatalf("replay of %s from a full store: %d replayed=%v", key, a.status, a.replayed)
		}
		if n := count(key); n != 1 {
			t.Fatalf("key %s ran %d times", key, n)
		}
	}
	t.Logf("a 256 KiB memory store held %d results of 8 KiB, refused the next key and replayed all %d", len(stored), len(stored))
	if v := g.metric(t, `idem_requests_total{outcome="store_full",route=""}`); v != 1 {
		t.Errorf(`idem_requests_total{outcome="store_full",route=""} = %v; want 1`, v)
	}
	if !strings.Contains(g.logText(), "the store is full") {
		t.Errorf("no warning logged for the full store:\n%s", g.logText())
	}
}

// Issue 22, item 10: one tenant's 300 KiB response filled a 256 KiB
// memory store, and every tenant's new keys got 503 store_full for the
// retention. A tenant holds at most --memory-tenant-share of the bound (a
// quarter by default): the big tenant's next key is refused, the others
// keep working, and the big response still replays.
func TestOneTenantCannotFillTheMemoryStore(t *testing.T) {
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL, "--memory-limit", "256KiB")
	base := "http://" + g.addr
	huge := `"` + strings.Repeat("x", 300<<10) + `"`
	if a := post(t, base, "huge", huge, "Authorization", "Bearer mallory"); a.status != 201 || len(a.body) < 300<<10 {
		t.Fatalf("the 300 KiB request = %d (%d bytes); want 201 with the whole answer", a.status, len(a.body))
	}
	if a := post(t, base, "next", `{}`, "Authorization", "Bearer mallory"); a.status != 503 || !strings.Contains(a.body, `"code":"store_full"`) {
		t.Fatalf("the big tenant's next key = %d %s; want 503 store_full", a.status, a.body)
	}
	for _, tenant := range []string{"alice", "bob"} {
		for _, key := range []string{"order-1", "order-2"} {
			if a := post(t, base, key, `{}`, "Authorization", "Bearer "+tenant); a.status != 201 || a.replayed {
				t.Fatalf("%s's %s with another tenant over its share = %d replayed=%v %s; want 201", tenant, key, a.status, a.replayed, a.body)
			}
		}
	}
	if a := post(t, base, "huge", huge, "Authorization", "Bearer mallory"); a.status != 201 || !a.replayed || len(a.body) < 300<<10 {
		t.Fatalf("retry of the 300 KiB request = %d replayed=%v; want its replay", a.status, a.replayed)
	}
	if n := up.count("huge"); n != 1 {
		t.Fatalf("the 300 KiB request ran %d times", n)
	}
}

// Finding 4: clients without credentials shared one tenant.
func TestAnonymousClientsAndCookieTenants(t *testing.T) {
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL)
	if a := post(t, "http://"+g.addr, "anon", `{}`, "Authorization", ""); a.status != 400 || !strings.Contains(a.body, "tenant_missing") {
		t.Fatalf("anonymous request = %d %s; want 400 tenant_missing", a.status, a.body)
	}
	if up.count("anon") != 0 {
		t.Fatal("an anonymous request reached the upstream")
	}

	up = newUpstream(t, 0)
	g = startGateway(t, "--upstream", up.URL, "--tenant-from", "authorization,cookie:session")
	alice := post(t, "http://"+g.addr, "order-1", `{}`, "Authorization", "", "Cookie", "session=alice")
	bob := post(t, "http://"+g.addr, "order-1", `{}`, "Authorization", "", "Cookie", "session=bob")
	if alice.status != 201 || bob.status != 201 || bob.replayed || up.count("order-1") != 2 {
		t.Fatalf("Bob with Alice's key: %d replayed=%v (upstream runs %d); want his own execution", bob.status, bob.replayed, up.count("order-1"))
	}
	if again := post(t, "http://"+g.addr, "order-1", `{}`, "Authorization", "", "Cookie", "session=alice"); !again.replayed || again.body != alice.body {
		t.Fatalf("Alice's retry: replayed=%v; want her response", again.replayed)
	}
	if a := post(t, "http://"+g.addr, "order-1", `{}`, "Authorization", ""); a.status != 400 || !strings.Contains(a.body, "tenant_missing") {
		t.Fatalf("request without cookie or Authorization = %d %s; want 400 tenant_missing", a.status, a.body)
	}

	up = newUpstream(t, 0)
	g = startGateway(t, "--upstream", up.URL, "--allow-anonymous")
	first := post(t, "http://"+g.addr, "shared", `{}`, "Authorization", "")
	second := post(t, "http://"+g.addr, "shared", `{}`, "Authorization", "")
	if first.status != 201 || !second.replayed {
		t.Fatalf("--allow-anonymous: %d then replayed=%v; want anonymous clients to share a tenant", first.status, second.replayed)
	}
}

// Finding 5: the admin API without a token was open on any address.
func TestAdminAPIRefusesTheNetworkWithoutAToken(t *testing.T) {
	cmd := exec.Command(binary, "serve", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin", "0.0.0.0:0")
	cmd.Env = withoutEnv("IDEM_ADMIN_TOKEN")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--admin-token") {
		t.Fatalf("--admin 0.0.0.0:0 without a token: %v %s; want exit 2 naming --admin-token", err, out)
	}
	// On loopback --admin-insecure allows nothing: refused, not ignored
	// (the bound ends a gateway that starts instead).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd = exec.CommandContext(ctx, binary, "serve", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--admin-insecure")
	cmd.Env = withoutEnv("IDEM_ADMIN_TOKEN")
	out, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--admin-insecure has no effect") {
		t.Fatalf("--admin 127.0.0.1:0 --admin-insecure: %v %s; want exit 2 saying --admin-insecure has no effect", err, out)
	}
	g := startGateway(t, "--upstream", "http://127.0.0.1:1", "--admin", "0.0.0.0:0", "--admin-insecure")
	if !strings.Contains(g.logText(), "INSECURE") {
		t.Fatalf("--admin-insecure started without a loud warning:\n%s", g.logText())
	}
	g = startGateway(t, "--upstream", "http://127.0.0.1:1") // loopback, no token
	if !strings.Contains(g.logText(), "no --admin-token") {
		t.Fatalf("the admin API on loopback without a token started without a warning:\n%s", g.logText())
	}
}

// Finding 6: the upstream URL's password was logged and echoed.
func TestNoURLPasswordInLogsErrorsOrMetrics(t *testing.T) {
	const secret = "hunter2"
	up := newUpstream(t, 0)
	withCreds := strings.Replace(up.URL, "http://", "http://user:"+secret+"@", 1)
	g := startGateway(t, "--upstream", withCreds, "--log-level", "debug")
	post(t, "http://"+g.addr, "k1", `{}`)
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://user:" + secret + "@" + dead.Addr().String()
	dead.Close()
	g2 := startGateway(t, "--upstream", deadURL, "--log-level", "debug")
	post(t, "http://"+g2.addr, "k2", `{}`)
	for _, gw := range []*gatewayProc{g, g2} {
		if strings.Contains(gw.metrics(t), secret) {
			t.Error("/metrics holds the upstream password")
		}
	}
	g.stop(t)
	g2.stop(t)
	for _, gw := range []*gatewayProc{g, g2} {
		if strings.Contains(gw.logText(), secret) {
			t.Errorf("the log holds the upstream password:\n%s", gw.logText())
		}
	}
	if !strings.Contains(g.logText(), "user:xxxxx@") {
		t.Errorf("the startup line does not show the redacted upstream:\n%s", g.logText())
	}
	for _, bad := range []string{"ftp://user:" + secret + "@host/", "http://user:" + secret + "@[::1", "http://user:" + secret + "@host:port%zz/x"} {
		out, _ := exec.Command(binary, "serve", "--upstream", bad).CombinedOutput()
		if strings.Contains(string(out), secret) || !strings.Contains(string(out), "--upstream") {
			t.Errorf("bad --upstream %q: %s; want a usage error without the password", bad, out)
		}
	}
	for _, bad := range []string{"http://user:" + secret + "@host/lookup", "ftp://user:" + secret + "@host/{key}", "http://user:" + secret + "@[::1/{key}"} {
		out, _ := exec.Command(binary, "serve", "--upstream", "http://127.0.0.1:1", "--admin", "", "--reconcile-url", bad).CombinedOutput()
		if strings.Contains(string(out), secret) || !strings.Contains(string(out), "--reconcile-url") {
			t.Errorf("bad --reconcile-url %q: %s; want a usage error without the password", bad, out)
		}
	}
	for _, target := range []string{"http://u:" + secret + "@127.0.0.1:1/x", "http://u:" + secret + "@192.0.2.1/x", "http://u:" + secret + "@[::1"} {
		out, _ := exec.Command(binary, "probe", "--timeout", "5s", target).CombinedOutput()
		if strings.Contains(string(out), secret) {
			t.Errorf("idem probe %q printed the password: %s", target, out)
		}
	}
}

// Finding 7: a response over the replay buffer could never be replayed.
func TestLargeResponseReplaysWithMaxResponse(t *testing.T) {
	body := make([]byte, 3<<20)
	rand.Read(body)
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	}))
	defer up.Close()
	g := startGateway(t, "--upstream", up.URL, "--max-response", "8MiB")
	for i := range 2 {
		a := post(t, "http://"+g.addr, "big", `{}`)
		if a.status != 201 || a.replayed != (i == 1) || !bytes.Equal([]byte(a.body), body) {
			t.Fatalf("attempt %d: %d replayed=%v, %d bytes (equal=%v); want the 3 MiB body byte-exact", i+1, a.status, a.replayed, len(a.body), a.body == string(body))
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times", n)
	}
	g = startGateway(t, "--upstream", up.URL) // the default 1 MiB buffer
	post(t, "http://"+g.addr, "big", `{}`)
	if a := post(t, "http://"+g.addr, "big", `{}`); a.status != 422 || !strings.Contains(a.body, "not_replayable") {
		t.Fatalf("3 MiB response with the default buffer, retried: %d; want 422 not_replayable", a.status)
	}
}
