package check

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/faultproxy"
)

// gatewayProc is one `idem serve` process of the harness's own, on fixed
// loopback ports so that a restart keeps its address.
type gatewayProc struct {
	bin, listen, admin string
	args               []string
	env                []string  // IDEM_ variables of its own
	log                io.Writer // when set, gets the process's stderr too (its log), across restarts

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs the process and waits until its admin API answers.
func (g *gatewayProc) start(ctx context.Context) error {
	cmd := exec.Command(g.bin, append([]string{"serve", "--listen", g.listen, "--admin", g.admin}, g.args...)...)
	// No IDEM_ variable from this environment (an IDEM_STORE or
	// IDEM_ADMIN_TOKEN of the developer's would override the run's
	// configuration): only the process's own.
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "IDEM_") }), g.env...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if g.log != nil {
		cmd.Stderr = io.MultiWriter(&stderr, g.log)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	g.mu.Lock()
	g.cmd, g.done = cmd, done
	g.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-done:
			return fmt.Errorf("idem serve exited at start: %s", stderr.Bytes())
		default:
		}
		if resp, err := http.Get("http://" + g.admin + "/healthz"); err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			g.Kill()
			return errors.New("idem serve did not answer within 30s")
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// Kill SIGKILLs the process and waits for it.
func (g *gatewayProc) Kill() {
	g.mu.Lock()
	cmd, done := g.cmd, g.done
	g.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// GatewayKill SIGKILLs an `idem serve` process in the middle of its
// requests, and starts it again on the same store when the fault ends.
type GatewayKill struct{ G *gatewayProc }

// Name implements Nemesis.
func (GatewayKill) Name() string { return "SIGKILL of one idem serve" }

// Inject implements Nemesis.
func (n GatewayKill) Inject(context.Context, *rand.Rand) (func() error, error) {
	n.G.Kill()
	return func() error { return n.G.start(context.Background()) }, nil
}

// gatewayEnv: two `idem serve` processes on one Redis (its append-only
// file fsynced at every write) behind the fault proxy, in front of the
// ledger as the upstream API. The run's clients send HTTP requests to
// either; the history is HTTP's (no store call of the gateways is seen),
// so the checker holds it to the invariants: one effect per key, and one
// result per key for every client.
func gatewayEnv(t *testing.T) *Env {
	bin := filepath.Join(t.TempDir(), "idem")
	build := exec.Command("go", "build", "-o", bin, "./cmd/idem")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/idem: %v\n%s", err, out)
	}
	s, p := privateRedis(t, "redis", "--appendonly", "yes", "--appendfsync", "always")
	up := &upstream{}
	srv := &http.Server{Addr: freeAddr(t), Handler: up, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	var gs []*gatewayProc
	for range 2 {
		g := &gatewayProc{bin: bin, listen: freeAddr(t), admin: freeAddr(t), args: []string{
			"--upstream", "http://" + srv.Addr, "--store", "redis://" + p.Addr(), "--lease", lease.String(),
			"--tenant-header", "X-Tenant-ID", "--log-level", "error", "--upstream-timeout", "2s"}}
		if err := g.start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Kill)
		gs = append(gs, g)
	}
	return &Env{
		Clients: func(ctx context.Context, w Workload, seed uint64, rec *Recorder, l *Ledger, tenant string, keys []string) {
			up.use(l)
			gatewayClients(ctx, w, seed, gs, rec, tenant, keys)
		},
		Nemeses: []Nemesis{GatewayKill{G: gs[0]}, GatewayKill{G: gs[0]}, Pause{What: "redis", P: s},
			Net{What: "redis", Proxy: p, Mode: faultproxy.DropEverySecond}},
	}
}

// upstream is the API behind the gateways: each request is one effect on
// the run's ledger, for the key the client names and the fence the
// gateway sends.
type upstream struct {
	mu     sync.Mutex
	ledger *Ledger
}

func (u *upstream) use(l *Ledger) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ledger = l
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	l := u.ledger
	u.mu.Unlock()
	fence, err := strconv.ParseInt(r.Header.Get("Idempotency-Fence"), 10, 64)
	if l == nil || err != nil {
		http.Error(w, "no run, or no fence", http.StatusBadRequest)
		return
	}
	time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // a request that takes a while
	began, _ := strconv.ParseInt(r.Header.Get("X-Check-Began"), 10, 64)
	v, err := l.Apply(r.Header.Get("X-Check-Key"), fence, false, noFault, began)
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	io.WriteString(w, v)
}

// gatewayClients runs the HTTP clients of a gateway run.
func gatewayClients(ctx context.Context, w Workload, seed uint64, gs []*gatewayProc, rec *Recorder, tenant string, keys []string) {
	hc := &http.Client{Timeout: 4 * w.Lease}
	defer hc.CloseIdleConnections()
	clientLoop(ctx, w, seed, func(ctx context.Context, rng *rand.Rand) bool {
		key := keys[rng.IntN(len(keys))]
		g := gs[rng.IntN(len(gs))]
		if rng.IntN(40) == 0 {
			adminDelete(ctx, hc, rec, g, tenant, key)
			return false
		}
		return gatewayRequest(ctx, hc, rec, g, tenant, key)
	})
}

// gatewayRequest sends one request; it reports a 503 or a failed call
// (the client backs off).
func gatewayRequest(ctx context.Context, hc *http.Client, rec *Recorder, g *gatewayProc, tenant, key string) bool {
	id := tenant + "/" + key
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.listen+"/charge", nil)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Tenant-ID", tenant)
	req.Header.Set("X-Check-Key", id)
	call := rec.Now()
	req.Header.Set("X-Check-Began", strconv.FormatInt(call, 10))
	resp, err := hc.Do(req)
	if err != nil {
		return true
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return true
	}
	if resp.StatusCode == http.StatusOK {
		rec.give(Given{Key: id, Body: string(body), Full: fmt.Sprintf("%d|%s", resp.StatusCode, body),
			Replay: resp.Header.Get("Idempotent-Replayed") == "true", Call: call, Return: rec.Now()})
	}
	return resp.StatusCode == http.StatusServiceUnavailable
}

// adminDelete deletes key through a gateway's admin API, and records it
// for the invariants (a delete may let a key run again).
func adminDelete(ctx context.Context, hc *http.Client, rec *Recorder, g *gatewayProc, tenant, key string) {
	lane, call := rec.begin()
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+g.admin+"/v1/keys/"+tenant+"/"+key, nil)
	out := Output{}
	resp, err := hc.Do(req)
	switch {
	case err != nil:
		out = Output{Info: true, Detail: err.Error()}
	default:
		resp.Body.Close()
		out.Existed = resp.StatusCode == http.StatusOK
		if resp.StatusCode >= 500 {
			out = Output{Info: true, Detail: resp.Status}
		}
	}
	rec.external(lane, call, Input{Kind: KDelete, Key: tenant + "/" + key}, out)
}
