package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// longE2E turns on the long variants of the fault tests (more requests).
var longE2E = os.Getenv("IDEM_LONG_E2E") != ""

// waitState polls the admin API until the key's record is in state, a
// condition in another process (there is nothing to wait on but polling).
func waitState(t *testing.T, g *gatewayProc, tenant, key, state string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for {
		code, body := adminCall(t, g, "GET", "/v1/keys/"+tenant+"/"+key, "", "")
		var rec struct{ State string }
		if code == 200 && json.Unmarshal([]byte(body), &rec) == nil && rec.State == state {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("key %s never reached %s: %d %s", key, state, code, body)
		}
	}
}

// TestGatewaySIGKILLMidRequest: the gateway is SIGKILLed while requests
// are at the upstream (which executes them all the same); a new gateway
// on the same Redis store gets the retries after the lease ended. With a
// reconcile URL each retry gets the upstream's real response replayed (0
// double executions); under --takeover run the upstream sees
// Idempotency-Previous-Fence, the killed attempt's fence; by default the
// key is UNKNOWN and nothing runs again.
func TestGatewaySIGKILLMidRequest(t *testing.T) {
	t.Parallel() // mostly waiting; its gateway, upstream and keys are its own
	testenv.Redis(t)
	n := 10
	if longE2E {
		n = 50
	}
	for _, mode := range []string{"reconcile", "takeover-run", "default"} {
		t.Run(mode, func(t *testing.T) {
			l := newLedger(t, "tok")
			l.seen = make(chan string, n)
			args := []string{"--upstream", l.URL, "--store", testenv.RedisURL(), "--lease", "1s", "--tenant-header", "X-Tenant-ID"}
			switch mode {
			case "reconcile":
				args = append(args, "--reconcile-url", l.URL+"/lookup/{key}", "--reconcile-token", "tok")
			case "takeover-run":
				args = append(args, "--takeover", "run", "--upstream-timeout", "1s") // the lease covers the upstream call
			}
			run := rand.Text()[:8]
			tenant := "kill-" + run
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("kill-%s-%d", run, i)
				l.slow[keys[i]] = 500 * time.Millisecond
			}
			a := startGateway(t, args...)
			var wg sync.WaitGroup
			for _, key := range keys {
				wg.Go(func() { tryPost("http://"+a.addr, key, `{"amount":5}`, "X-Tenant-ID", tenant) })
			}
			l.waitSeen(t, n)
			a.cmd.Process.Kill()
			<-a.done
			wg.Wait()
			for _, key := range keys {
				l.waitFinished(t, key)
			}
			b := startGateway(t, args...)
			for _, key := range keys {
				waitState(t, b, tenant, key, "UNKNOWN") // the lease ended: the record reads UNKNOWN (abandoned)
			}
			replayed, unknown, prevFence := 0, 0, 0
			for _, key := range keys {
				got := post(t, "http://"+b.addr, key, `{"amount":5}`, "X-Tenant-ID", tenant)
				switch mode {
				case "reconcile":
					if got.status != 201 || !got.replayed || got.body != l.result(key) {
						t.Errorf("%s: %d %q replayed=%v; want the upstream's real response %q replayed", key, got.status, got.body, got.replayed, l.result(key))
					}
					replayed++
				case "takeover-run":
					l.mu.Lock()
					prev, fences := l.prev[key], l.fences[key]
					l.mu.Unlock()
					if got.status != 201 || len(prev) != 1 || len(fences) != 2 || prev[0] != fences[0] || fences[1] <= fences[0] {
						t.Errorf("%s: %d; previous fences %q, fences %q; want the killed attempt's fence as Idempotency-Previous-Fence", key, got.status, prev, fences)
					}
					prevFence++
				default:
					if got.status != 503 || !strings.Contains(got.body, "outcome_unknown") {
						t.Errorf("%s: %d %s; want 503 outcome_unknown", key, got.status, got.body)
					}
					unknown++
				}
			}
			doubled, extra := l.doubles()
			if mode != "takeover-run" && doubled != 0 {
				t.Errorf("%d keys executed twice; want 0", doubled)
			}
			t.Logf("%s: %d requests in flight at SIGKILL: %d extra executions, %d replayed the real response, %d forwarded with Idempotency-Previous-Fence, %d UNKNOWN",
				mode, n, extra, replayed, prevFence, unknown)
		})
	}
}

// TestRedisStalledPastTheLease: the store (a redis-server of this test's
// own) is SIGSTOPped while requests are at the upstream, longer than the
// lease, and more requests come during the stall. The requests in flight
// are cut at their local lease deadline (the log gives how close: 5 ms on
// a quiet machine; the test allows 500 ms for a loaded one, far below the
// 3.67 s late cut of a client that waited for the store), none is
// forwarded after its lease ended, and nothing runs twice.
func TestRedisStalledPastTheLease(t *testing.T) {
	ctx := context.Background()
	srv, err := redisproc.Start(ctx, redisproc.Config{Dir: t.TempDir()})
	if err != nil {
		testenv.Unavailable(t, "a redis-server of this test's own", err)
	}
	defer srv.Kill()
	const lease = 2 * time.Second
	n := 5
	if longE2E {
		n = 40
	}
	l := newLedger(t, "")
	l.seen = make(chan string, 2*n)
	g := startGateway(t, "--upstream", l.URL, "--store", "redis://"+srv.Addr+"/0", "--lease", lease.String())
	var mu sync.Mutex
	sent := map[string]time.Time{}
	send := func(key string) {
		mu.Lock()
		sent[key] = time.Now()
		mu.Unlock()
		tryPost("http://"+g.addr, key, `{}`)
	}
	for i := range n {
		l.slow[fmt.Sprintf("inflight-%d", i)] = 2 * lease // longer than the lease: cut by it
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { send(fmt.Sprintf("inflight-%d", i)) })
	}
	l.waitSeen(t, n)
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	for i := range n { // their acquire waits for the stalled store
		wg.Go(func() { send(fmt.Sprintf("late-%d", i)) })
	}
	time.Sleep(lease + time.Second) // the fault: the store stalls past the lease
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var worst time.Duration
	late := 0
	l.mu.Lock()
	for key, at := range sent {
		if arrived, ok := l.arrived[key]; ok && arrived.After(at.Add(lease)) {
			late++
			t.Errorf("%s reached the upstream %v after its send, past the %v lease", key, arrived.Sub(at), lease)
		}
		if !strings.HasPrefix(key, "inflight") {
			continue
		}
		cut, ok := l.cut[key]
		if !ok {
			t.Errorf("%s: the upstream call was not cut by the lease", key)
			continue
		}
		// The local deadline counts from before the acquire, which is
		// after the send: cut - (send + lease) bounds cut - deadline.
		over := cut.Sub(at.Add(lease))
		worst = max(worst, over)
		if over > 500*time.Millisecond {
			t.Errorf("%s: cut %v after send+lease; want it at the local deadline", key, over)
		}
	}
	l.mu.Unlock()
	for key := range sent {
		l.waitFinishedIfStarted(t, key)
		post(t, "http://"+g.addr, key, `{}`)
	}
	doubled, extra := l.doubles()
	if doubled != 0 {
		t.Errorf("%d keys executed twice (%d extra); want 0", doubled, extra)
	}
	t.Logf("Redis SIGSTOPped %v with %d requests in flight (lease %v) and %d more sent: cut at most %v after send+lease; %d forwarded after their lease; %d extra executions",
		lease+time.Second, n, lease, n, worst.Round(time.Millisecond), late, extra)
}

// waitSeen waits until n executions have started at the ledger; a
// request that never reaches it fails the test instead of hanging it.
func (l *ledger) waitSeen(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for i := range n {
		select {
		case <-l.seen:
		case <-deadline:
			t.Fatalf("%d of %d requests reached the upstream", i, n)
		}
	}
}

// waitFinishedIfStarted waits for the key's execution, if it ever reached
// the ledger.
func (l *ledger) waitFinishedIfStarted(t *testing.T, key string) {
	l.mu.Lock()
	_, started := l.finished[key]
	l.mu.Unlock()
	if started {
		l.waitFinished(t, key)
	}
}

// TestKeysCommandUnknown: idem keys list --unknown finds a key the
// gateway left UNKNOWN, through its admin API, and idem keys resolve
// settles it (a stale fence is refused, changing nothing); the gateway
// then replays the operator's response.
func TestKeysCommandUnknown(t *testing.T) {
	testenv.Redis(t)
	l := newLedger(t, "")
	key := "cli-" + rand.Text()[:8]
	l.drop[key] = true
	g := startGateway(t, "--upstream", l.URL, "--store", testenv.RedisURL(), "--tenant-header", "X-Tenant-ID")
	tenant := "tenant-" + rand.Text()[:8]
	post(t, "http://"+g.addr, key, `{}`, "X-Tenant-ID", tenant)
	keys := func(args ...string) (string, error) {
		out, err := exec.Command(binary, append([]string{"keys", "--admin", g.admin}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := keys("list", "--unknown", "--tenant", tenant)
	var rec struct {
		Key, State string
		Fence      int64
	}
	if err != nil || json.Unmarshal([]byte(out), &rec) != nil || rec.Key != key || rec.State != "UNKNOWN" {
		t.Fatalf("idem keys list --unknown: %v\n%s", err, out)
	}
	if out, err := keys("resolve", "--fence", fmt.Sprint(rec.Fence+1), "--not-executed", tenant, key); err == nil || !strings.Contains(out, "fence") {
		t.Fatalf("resolve with a stale fence: %v %s; want an error", err, out)
	}
	if out, err := keys("resolve", "--fence", fmt.Sprint(rec.Fence), "--status", "201", "--header", "Content-Type: text/plain", "--body", "settled", tenant, key); err != nil {
		t.Fatalf("idem keys resolve: %v\n%s", err, out)
	}
	if a := post(t, "http://"+g.addr, key, `{}`, "X-Tenant-ID", tenant); a.status != 201 || !a.replayed || a.body != "settled" || l.executions(key) != 1 {
		t.Fatalf("after idem keys resolve: %d %q replayed=%v, %d executions", a.status, a.body, a.replayed, l.executions(key))
	}
}

// TestCrashedGatewayKeysAreListed: the keys of a gateway SIGKILLed while
// its requests were at the upstream are listed UNKNOWN (abandoned) by
// another gateway on the same store, and counted in idem_unknown_keys,
// once their lease ends, with no client retrying them; a gateway with a
// reconcile sweep then settles them from the upstream's records, still
// with no retry (issue 31, item 6: they were invisible until a client
// came back, and none may ever come).
func TestCrashedGatewayKeysAreListed(t *testing.T) {
	// Stores of this test's own: idem_unknown_keys counts every tenant.
	stores := map[string]func(t *testing.T) string{
		"redis": func(t *testing.T) string {
			srv, err := redisproc.Start(t.Context(), redisproc.Config{Dir: t.TempDir()})
			if err != nil {
				testenv.Unavailable(t, "a redis-server of this test's own", err)
			}
			t.Cleanup(srv.Kill)
			return "redis://" + srv.Addr + "/0"
		},
		"postgres": privateDatabase,
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each waits out a census of the gauge
			uri := open(t)
			const n, lease = 5, time.Second
			l := newLedger(t, "tok")
			l.seen = make(chan string, n)
			// Every execution is held at the upstream until the gateway is
			// killed: none can finish first, however slow the machine.
			l.gate = make(chan struct{})
			tenant := "crashed-" + rand.Text()[:8]
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("%s-%d", tenant, i)
			}
			args := []string{"--upstream", l.URL, "--store", uri, "--lease", lease.String(), "--tenant-header", "X-Tenant-ID"}
			a := startGateway(t, args...)
			b := startGateway(t, args...) // shares the store, and is never asked about these keys by a client
			var wg sync.WaitGroup
			for _, key := range keys {
				wg.Go(func() { tryPost("http://"+a.addr, key, `{"amount":5}`, "X-Tenant-ID", tenant) })
			}
			l.waitSeen(t, n)
			a.cmd.Process.Kill()
			killed := time.Now()
			<-a.done
			close(l.gate) // the charges happen anyway, their answers to nobody
			wg.Wait()

			listed := waitListed(t, b, tenant, n)
			t.Logf("%s: %d keys of a SIGKILLed gateway listed UNKNOWN %v after the kill (lease %v), with no retry", name, n, listed.Round(time.Millisecond), lease)
			// The gauge is a census the gateway takes at most every 15 s
			// (its console's samples took one at start): the next counts
			// them.
			counted := waitMetric(t, b, fmt.Sprintf("idem_unknown_keys %d", n))
			t.Logf("%s: counted in idem_unknown_keys %v after the kill", name, counted.Sub(killed).Round(time.Millisecond))

			// A sweep settles them from the upstream's records: every key
			// ran once, and its response is kept for the retry to come.
			startGateway(t, append(args, "--reconcile-url", l.URL+"/lookup/{key}", "--reconcile-token", "tok", "--reconcile-every", "200ms")...)
			for _, key := range keys {
				waitState(t, b, tenant, key, "COMPLETED")
			}
			t.Logf("%s: swept to COMPLETED %v after the kill", name, time.Since(killed).Round(time.Millisecond))
			for _, key := range keys {
				if got := post(t, "http://"+b.addr, key, `{"amount":5}`, "X-Tenant-ID", tenant); got.status != 201 || !got.replayed || got.body != l.result(key) {
					t.Errorf("%s after the sweep: %d %q replayed=%v; want the upstream's response replayed", key, got.status, got.body, got.replayed)
				}
			}
			if doubled, _ := l.doubles(); doubled != 0 {
				t.Errorf("%d keys executed twice; want 0", doubled)
			}
		})
	}
}

// waitListed polls the admin API's UNKNOWN listing of tenant until it
// holds n keys, all abandoned, and returns how long that took (a
// condition in another process: polling is all there is).
func waitListed(t *testing.T, g *gatewayProc, tenant string, n int) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for {
		code, body := adminCall(t, g, "GET", "/v1/keys?state=unknown&tenant="+tenant, "", "")
		var p struct {
			Keys []struct{ Key, State, Reason string }
		}
		if code == 200 && json.Unmarshal([]byte(body), &p) == nil && len(p.Keys) == n {
			for _, k := range p.Keys {
				if k.State != "UNKNOWN" || k.Reason != "abandoned" {
					t.Fatalf("listed %+v; want UNKNOWN, abandoned", k)
				}
			}
			return time.Since(start)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the keys of tenant %s were never all listed UNKNOWN: %d %s", tenant, code, body)
		}
	}
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, s) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "; ")
}

// privateDatabase creates a database of t's own on the test server and
// returns its URL; it is dropped when t ends, after the gateways t started
// (cleanups run last first).
func privateDatabase(t *testing.T) string {
	t.Helper()
	testenv.Postgres(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL())
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", err)
	}
	defer conn.Close(context.Background())
	name := "idem_e2e_" + strings.ToLower(rand.Text()[:10])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), testenv.DatabaseURL())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// waitMetric polls the admin API's /metrics until a line reads want, and
// returns when it did.
func waitMetric(t *testing.T, g *gatewayProc, want string) time.Time {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		_, metrics := adminCall(t, g, "GET", "/metrics", "", "")
		for line := range strings.Lines(metrics) {
			if strings.TrimSpace(line) == want {
				return time.Now()
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("/metrics never read %q: %s", want, grepLines(metrics, strings.Fields(want)[0]))
		}
	}
}
