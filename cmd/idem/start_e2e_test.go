package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/faultproxy"
	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// startingAdmin waits for the line that says the admin API is up while the
// store has not answered, and returns its address.
func (g *gatewayProc) startingAdmin(t *testing.T) string {
	t.Helper()
	g.waitForLog(t, "idem: admin API up", 1)
	for line := range strings.SplitSeq(g.logText(), "\n") {
		var ev struct{ Msg, Admin string }
		if json.Unmarshal([]byte(line), &ev) == nil && strings.HasPrefix(ev.Msg, "idem: admin API up") {
			return ev.Admin
		}
	}
	t.Fatal("no admin address in the log")
	return ""
}

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Issue 31, item 9: a store down at start made idem serve exit 2, which
// the systemd unit never restarts (RestartPreventExitStatus=2), so a
// database slow to boot left the gateway down for good. Now the store is
// retried, each failure logged; /healthz answers 200 and /readyz 503 on
// the admin address meanwhile; once the store answers the gateway serves
// and /readyz answers 200. Redis: a redis-server of this test's own,
// killed before the gateway starts and started again, on both clients
// (rueidis, the default, fails to open; go-redis opens and its first
// call fails). PostgreSQL: the
// test database behind a proxy that refuses connections, then forwards.
// Item 13 too: go-redis's own lines (its failed dials) are JSON lines of
// the gateway's log, as --log-format json says.
func TestStoreDownAtStart(t *testing.T) {
	t.Parallel() // mostly waiting; its gateway, upstream and keys are its own
	testenv.Postgres(t)
	srv, err := redisproc.Start(context.Background(), redisproc.Config{Dir: t.TempDir()})
	if err != nil {
		testenv.Unavailable(t, "a redis-server of this test's own", err)
	}
	t.Cleanup(srv.Kill)
	srv.Kill()
	pg, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	pgProxy, err := faultproxy.New(pg.Host)
	if err != nil {
		t.Fatal(err)
	}
	pg.Host = pgProxy.Addr()
	t.Cleanup(func() { pgProxy.Close() })
	for name, c := range map[string]struct {
		uri         string
		down, start func() error
	}{
		// rueidis, the default, dials at open; go-redis at the first call.
		"redis":          {"redis://" + srv.Addr + "/0", func() error { srv.Kill(); return nil }, func() error { return srv.Restart(context.Background()) }},
		"redis-go-redis": {"redis://" + srv.Addr + "/0?client=go-redis", func() error { srv.Kill(); return nil }, func() error { return srv.Restart(context.Background()) }},
		"postgres": {pg.String(), func() error { pgProxy.SetMode(faultproxy.Partition); return nil },
			func() error { pgProxy.SetMode(faultproxy.Forward); return nil }},
	} {
		t.Run(name, func(t *testing.T) {
			if err := c.down(); err != nil {
				t.Fatal(err)
			}
			up := newUpstream(t, 0)
			g := launchServe(t, nil, "--upstream", up.URL, "--store", c.uri, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json")
			admin := "http://" + g.startingAdmin(t)
			g.waitForLog(t, "the store does not answer; retrying", 2)
			if code, _ := get(t, admin+"/healthz"); code != http.StatusOK {
				t.Errorf("/healthz before the store answers = %d; want 200 (alive)", code)
			}
			if code, body := get(t, admin+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "store_unavailable") {
				t.Errorf("/readyz before the store answers = %d %s; want 503 store_unavailable", code, body)
			}
			if err := c.start(); err != nil {
				t.Fatal(err)
			}
			g.waitServing(t)
			if g.admin != strings.TrimPrefix(admin, "http://") {
				t.Errorf("the admin API moved from %s to %s", admin, g.admin)
			}
			if code, body := get(t, admin+"/readyz"); code != http.StatusOK {
				t.Errorf("/readyz once the store answers = %d %s; want 200", code, body)
			}
			key := "downatstart-" + testenv.Prefix(t)
			if a := post(t, "http://"+g.addr, key, "{}"); a.status != 201 || up.count(key) != 1 {
				t.Errorf("a request once the store answers = %d %s; want 201", a.status, a.body)
			}
			if err := g.stop(t); err != nil {
				t.Errorf("exit after SIGTERM = %v; want 0", err)
			}
			logEvents(t, g) // every line JSON
			if name == "redis-go-redis" && !strings.Contains(g.logText(), `"msg":"idem: redis client"`) {
				t.Errorf("go-redis's failed dials are not in the JSON log:\n%s", g.logText())
			}
		})
	}
}

// A SIGTERM while the store has not answered yet stops the wait and
// exits 0; a bad store URL or a bad file exits 2 at once, without waiting
// for any store.
func TestStartExitStatus(t *testing.T) {
	g := launchServe(t, nil, "--upstream", "http://127.0.0.1:1", "--store", "redis://127.0.0.1:1/0", "--listen", "127.0.0.1:0",
		"--admin", "127.0.0.1:0", "--log-format", "json")
	g.waitForLog(t, "the store does not answer; retrying", 1)
	if err := g.stop(t); err != nil {
		t.Errorf("exit after SIGTERM while waiting for the store = %v; want 0", err)
	}
	for _, args := range [][]string{
		{"--store", "postgres://u@127.0.0.1:notaport/db"},
		{"--store", "redis://127.0.0.1:1/0?near_cache=maybe"},
		{"--store", "redis://127.0.0.1:1/0?schema=x"},
		{"--store", "postgres://u@127.0.0.1:1/db", "--schema", "x"},
		{"--reconcile-url", "http://127.0.0.1:1/no-key"},
		{"--config", writeConfig(t, "store: redis://127.0.0.1:1/0\nroutes:\n  - match: POST /{a}/x\n  - match: POST /x/{b}\n")},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, binary, append([]string{"serve", "--upstream", "http://127.0.0.1:1"}, args...)...).CombinedOutput()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || strings.Contains(string(out), "gateway: gateway:") {
			t.Errorf("idem serve %v: %v\n%s\nwant exit 2 at once, with no doubled prefix", args, err, out)
		}
	}
}

// On SIGTERM /readyz fails first; the proxy keeps serving through
// --drain-delay, then stops accepting; the exit status is 0. The delay is
// long so that a loaded machine still sees the order.
func TestReadyzFailsBeforeTheListenerCloses(t *testing.T) {
	t.Parallel() // mostly waiting; its gateway, upstream and keys are its own
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL, "--drain-delay", "10s")
	if code, _ := get(t, "http://"+g.admin+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d; want 200", code)
	}
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	g.waitForLog(t, "idem: draining", 1)
	code, body := get(t, "http://"+g.admin+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Errorf("/readyz while draining = %d %s; want 503 draining", code, body)
	}
	key := "draining-" + testenv.Prefix(t)
	if a := post(t, "http://"+g.addr, key, "{}"); a.status != 201 || up.count(key) != 1 {
		t.Errorf("a request while /readyz fails, before the drain delay ends = %d %s; want 201 (the proxy still accepts)", a.status, a.body)
	}
	if strings.Contains(g.logText(), "idem: shutting down") {
		t.Errorf("the proxy stopped before the drain delay ended:\n%s", g.logText())
	}
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("exit after the drain = %v; want 0", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the gateway did not exit 60 s after SIGTERM")
	}
	logs := g.logText()
	if d, s := strings.Index(logs, "idem: draining"), strings.Index(logs, "idem: shutting down"); d < 0 || s < d {
		t.Errorf("draining at %d, shutting down at %d in the log; want draining first", d, s)
	}
}

// Without a drain delay too: while in-flight requests drain, the proxy
// refuses new connections and /readyz answers 503 (it answered 200
// throughout the drain).
func TestReadyzFailsDuringTheDrain(t *testing.T) {
	up := newUpstream(t, 3*time.Second)
	up.seen = make(chan string, 1)
	g := startGateway(t, "--upstream", up.URL)
	inflight := make(chan answer, 1)
	go func() { inflight <- post(t, "http://"+g.addr, "drain-"+testenv.Prefix(t), "{}") }()
	<-up.seen
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	g.waitForLog(t, "idem: shutting down", 1)
	if code, body := get(t, "http://"+g.admin+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Errorf("/readyz during the drain = %d %s; want 503 draining", code, body)
	}
	if a := <-inflight; a.status != 201 {
		t.Errorf("the request in flight at SIGTERM = %d %s; want 201 (drained)", a.status, a.body)
	}
	if err := g.stop(t); err != nil {
		t.Errorf("exit after the drain = %v; want 0", err)
	}
}

// idem serve runs the collector at GOGC=200, or more while the live heap
// is small (heapHeadroom), unless GOGC says otherwise (Go's own variable:
// 100 is Go's default), says which in its first log line, and refuses a
// GOGC the runtime would read as 100 without a word (not a number) or as
// off (negative), with --check-config as at start.
func TestServeGOGC(t *testing.T) {
	for _, c := range []struct {
		env, percent, from string
	}{
		{"", "200", fromDefault}, // empty, as the runtime reads it: not set
		{"150", "150", "GOGC"},
	} {
		g := launchServe(t, []string{"GOGC=" + c.env}, "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0",
			"--admin", "127.0.0.1:0", "--log-format", "json")
		g.waitServing(t)
		_, metrics := get(t, "http://"+g.admin+"/metrics")
		_, v, _ := strings.Cut(metrics, "\ngo_gc_gogc_percent ")
		v, _, _ = strings.Cut(v, "\n")
		percent, err := strconv.Atoi(v)
		// The default's percentage is 200 until a cycle sets the floor's.
		if want, _ := strconv.Atoi(c.percent); err != nil || percent < want || c.from != fromDefault && percent != want {
			t.Errorf("GOGC=%q: /metrics says go_gc_gogc_percent %q; want %s (at least, by default)", c.env, v, c.percent)
		}
		var first struct {
			GOGC     int    `json:"gogc"`
			GOGCFrom string `json:"gogc_from"`
		}
		line, _, _ := strings.Cut(g.logText(), "\n")
		if err := json.Unmarshal([]byte(line), &first); err != nil || fmt.Sprint(first.GOGC) != c.percent || first.GOGCFrom != c.from {
			t.Errorf("GOGC=%q: the first log line %s says gogc %d from %q; want %s from %q", c.env, line, first.GOGC, first.GOGCFrom, c.percent, c.from)
		}
	}
	wantEnvRefused(t, "GOGC", "lots", "-1", "200%")
}

// wantEnvRefused checks that idem serve, at start and with
// --check-config, exits 2 naming name=bad for each of bads.
func wantEnvRefused(t *testing.T, name string, bads ...string) {
	t.Helper()
	for _, bad := range bads {
		for _, args := range [][]string{{"serve", "--upstream", "http://127.0.0.1:1"}, {"serve", "--upstream", "http://127.0.0.1:1", "--check-config"}} {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			cmd := exec.CommandContext(ctx, binary, args...)
			cmd.Env = append(withoutEnv(name), name+"="+bad)
			out, err := cmd.CombinedOutput()
			cancel()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), name+"="+strconv.Quote(bad)) {
				t.Errorf("idem %v with %s=%s: %v\n%s\nwant exit 2 naming %s", args, name, bad, err, out, name)
			}
		}
	}
}

// idem serve runs on one P while the proxied requests do not overlap and
// on the runtime's default while they do, unless GOMAXPROCS is set; the
// first log line says which, and a GOMAXPROCS the runtime would ignore
// without a word (not a number, below 1) is refused, with --check-config
// as at start.
func TestServeGOMAXPROCS(t *testing.T) {
	arrived, release := make(chan struct{}, 2), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	type firstLine struct {
		Procs int    `json:"gomaxprocs"`
		From  string `json:"gomaxprocs_from"`
	}
	first := func(g *gatewayProc) firstLine {
		t.Helper()
		line, _, _ := strings.Cut(g.logText(), "\n")
		var f firstLine
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("the first log line %s: %v", line, err)
		}
		return f
	}
	procsNow := func(g *gatewayProc) string {
		t.Helper()
		_, metrics := get(t, "http://"+g.admin+"/metrics")
		_, v, _ := strings.Cut(metrics, "\ngo_sched_gomaxprocs_threads ")
		v, _, _ = strings.Cut(v, "\n")
		return v
	}
	// GOMAXPROCS is another process's: there is nothing to wait on but polling.
	waitProcs := func(g *gatewayProc, want string) {
		t.Helper()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(20 * time.Second)
		for procsNow(g) != want {
			select {
			case <-deadline:
				t.Fatalf("go_sched_gomaxprocs_threads is %s after 20 s; want %s", procsNow(g), want)
			case <-tick.C:
			}
		}
	}
	flags := []string{"--upstream", up.URL, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json"}

	g := launchServe(t, []string{"GOMAXPROCS="}, flags...) // empty, as the runtime reads it: not set
	g.waitServing(t)
	f := first(g)
	if f.From == "Go's default" {
		t.Skipf("the runtime's default is %d P here: nothing to switch", f.Procs)
	}
	if f.From != "idem serve's default: 1 while requests do not overlap" || f.Procs < 2 {
		t.Fatalf("the first log line says gomaxprocs %d from %q; want the runtime's default from idem serve's default", f.Procs, f.From)
	}
	waitProcs(g, "1")
	answers := make(chan answer, 2)
	for i := range 2 {
		go func() { answers <- post(t, "http://"+g.addr, fmt.Sprintf("procs-%d-%s", i, testenv.Prefix(t)), "{}") }()
	}
	<-arrived
	<-arrived
	waitProcs(g, strconv.Itoa(f.Procs)) // two requests in flight
	close(release)
	for range 2 {
		if a := <-answers; a.status != http.StatusCreated {
			t.Errorf("a request = %d %s; want 201", a.status, a.body)
		}
	}
	waitProcs(g, "1")

	g = launchServe(t, []string{"GOMAXPROCS=3"}, flags...)
	g.waitServing(t)
	if f := first(g); f.Procs != 3 || f.From != "GOMAXPROCS" {
		t.Errorf("GOMAXPROCS=3: the first log line says gomaxprocs %d from %q; want 3 from GOMAXPROCS", f.Procs, f.From)
	}
	if got := procsNow(g); got != "3" {
		t.Errorf("GOMAXPROCS=3: go_sched_gomaxprocs_threads = %s", got)
	}

	wantEnvRefused(t, "GOMAXPROCS", "lots", "0", "-2", "1.5")
}

// A Redis store whose server may evict keys is refused at start (exit 2,
// naming maxmemory-policy): out of memory, such a server dropped an
// UNKNOWN key, and its retry ran the request a second time. The check is
// the library's (redisstore.Store.CheckEviction), so the URL's
// allow_eviction=on opts out. The layered store's Redis, a mirror
// PostgreSQL backs, is not refused.
func TestStartRefusesEvictingRedis(t *testing.T) {
	testenv.Redis(t)
	srv, err := redisproc.Start(t.Context(), redisproc.Config{Dir: t.TempDir(),
		Args: []string{"--maxmemory", "4mb", "--maxmemory-policy", "volatile-lru"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	for _, client := range []string{"go-redis", "rueidis"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, binary, "serve", "--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
			"--store", "redis://"+srv.Addr+"/0?client="+client).CombinedOutput()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "maxmemory-policy is volatile-lru") {
			t.Errorf("idem serve on a volatile-lru Redis (client %s): %v\n%s\nwant exit 2 naming maxmemory-policy", client, err, out)
		}
	}
	g := startGateway(t, "--upstream", "http://127.0.0.1:1", "--store", "redis://"+srv.Addr+"/0+"+testenv.DatabaseURL())
	if err := g.stop(t); err != nil {
		t.Errorf("layered store on a volatile-lru Redis: exit %v; want 0", err)
	}
	g = startGateway(t, "--upstream", "http://127.0.0.1:1", "--store", "redis://"+srv.Addr+"/0?allow_eviction=on")
	if err := g.stop(t); err != nil {
		t.Errorf("allow_eviction=on on a volatile-lru Redis: exit %v; want 0", err)
	}
}
