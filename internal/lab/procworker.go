package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/store/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// workerEnvVar holds, in the environment of a worker process, its
// configuration (procConfig as JSON).
const workerEnvVar = "IDEM_LAB_WORKER"

// procStartTimeout bounds how long a worker process may take to listen.
const procStartTimeout = 30 * time.Second

// MaybeRunWorker runs this process as one of the breach lab's worker
// processes, and exits, when the lab started it as one (the environment
// variable IDEM_LAB_WORKER is set); otherwise it returns at once. The lab
// starts its worker processes from its own executable, so every program
// that runs the lab (cmd/idem, the lab's tests) calls it first thing in
// main or TestMain.
func MaybeRunWorker() {
	conf, ok := os.LookupEnv(workerEnvVar)
	if !ok {
		return
	}
	if err := runWorkerProcess(conf, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "idem lab worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// procConfig is what a worker process is told: everything in workerEnv
// that can cross a process boundary.
type procConfig struct {
	Impl          string
	ID            int
	Tenant        string
	Prefix        string
	Lease         time.Duration
	RedisAddr     string
	RedisDB       int
	RedisUsername string
	RedisPassword string
	PostgresURL   string
	Schema        string
	PayURL        string
	PayTimeout    time.Duration
}

// procReply is a worker process's answer to one request.
type procReply struct {
	Charge string
	Kind   string // ok, busy, unknown, error
	Err    string
	Retry  bool  // Kind unknown: asking again can help
	Fenced int64 // the process's count of refused stale owners so far
}

// runWorkerProcess serves one worker over HTTP on a free loopback port
// (POST /handle?key=K), announces "ready ADDR" on stdout, and runs until
// stdin ends: the lab closes it, or dies.
func runWorkerProcess(conf string, stdin io.Reader, stdout io.Writer) error {
	var c procConfig
	if err := json.Unmarshal([]byte(conf), &c); err != nil {
		return fmt.Errorf("%s: %w", workerEnvVar, err)
	}
	im, ok := implByName(c.Impl)
	if !ok || im.store != naiveLock && im.store != redisStore {
		return fmt.Errorf("%s: implementation %q cannot run in a worker process", workerEnvVar, c.Impl)
	}
	ctx := context.Background()
	pcfg, err := pgxpool.ParseConfig(c.PostgresURL)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	pg := &pgLab{pool: pool, schema: c.Schema}
	if pg.guard, err = pgstore.New(pool, &pgstore.Options{Schema: c.Schema, ReapInterval: -1}); err != nil { // the guardrail only
		return err
	}
	pay := newPayClient(c.PayURL, c.PayTimeout)
	defer pay.close()
	ep := newEndpoint(c.RedisAddr)
	base := &redis.Options{Addr: c.RedisAddr, DB: c.RedisDB, Username: c.RedisUsername, Password: c.RedisPassword}
	env := &workerEnv{Tenant: c.Tenant, Prefix: c.Prefix, Lease: c.Lease, Pay: pay, Reconcile: im.reconcile,
		Ledger: plainLedger{pg}, Fenced: new(atomic.Int64), NewRedis: redisClients(base, ep)}
	if im.guardrail {
		env.Ledger = guardLedger{pg: pg, pool: pool}
	}
	w, err := newWorker(im, c.ID, env)
	if err != nil {
		return err
	}
	defer w.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /handle", func(rw http.ResponseWriter, r *http.Request) {
		ch, err := w.Handle(r.Context(), r.URL.Query().Get("key"))
		rep := procReply{Charge: ch, Kind: "ok"}
		var unknown *unknownAnswer
		switch {
		case errors.As(err, &unknown):
			rep.Kind, rep.Retry, rep.Err = "unknown", unknown.Retry, unknown.Reason
		case errors.Is(err, errBusy):
			rep.Kind = "busy"
		case err != nil:
			rep.Kind, rep.Err = "error", err.Error()
		}
		rep.Fenced = env.Fenced.Load()
		writeJSON(rw, http.StatusOK, rep)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	if _, err := fmt.Fprintf(stdout, "ready %s\n", ln.Addr()); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, stdin)
	return nil
}

// procWorker is a worker in a process of its own, started from the lab's
// executable (see MaybeRunWorker): a SIGKILL takes its requests, its store
// client and its lease heartbeats with it, as a crash of an application
// server does. killAndRestart kills it and starts a new process.
type procWorker struct {
	id     int
	conf   []byte
	fenced *atomic.Int64 // the run's count, which every reply's new refusals are added to
	hc     *http.Client

	mu       sync.Mutex
	p        *workerProc // the running process; nil while it restarts, or when it could not
	startErr error       // why the last restart failed
	closed   bool
	restarts sync.WaitGroup
}

// workerProc is one process of a procWorker.
type workerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	addr   string
	done   chan struct{} // closed when the process has exited and been reaped
	stderr *bytes.Buffer // read only after done

	mu     sync.Mutex
	fenced int64 // the highest count the process reported
}

func startProcWorker(id int, c procConfig, fenced *atomic.Int64) (*procWorker, error) {
	c.ID = id
	conf, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	w := &procWorker{id: id, conf: conf, fenced: fenced, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}}
	if w.p, err = w.start(); err != nil {
		return nil, err
	}
	return w, nil
}

// start runs a new process and waits until it listens.
func (w *procWorker) start() (*workerProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("lab: worker processes run this executable: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), workerEnvVar+"="+string(w.conf))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &workerProc{cmd: cmd, stdin: stdin, done: make(chan struct{}), stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("lab: start a worker process: %w", err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	t := time.NewTimer(procStartTimeout)
	defer t.Stop()
	var ready string
	select {
	case ready = <-line:
	case <-t.C:
		_ = cmd.Process.Kill()
		ready = <-line // the pipe ends with the process
	}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	addr, ok := strings.CutPrefix(strings.TrimSpace(ready), "ready ")
	if !ok {
		_ = cmd.Process.Kill()
		<-p.done
		return nil, fmt.Errorf("lab: worker process %d did not start (does this program call lab.MaybeRunWorker first?): %s",
			w.id, strings.TrimSpace(p.stderr.String()))
	}
	p.addr = addr
	return p, nil
}

// Handle sends the request to the worker's process. A process that dies
// before it answers gives a 502, as a load balancer would.
func (w *procWorker) Handle(ctx context.Context, key string) (string, error) {
	w.mu.Lock()
	p, startErr := w.p, w.startErr
	w.mu.Unlock()
	if p == nil {
		return "", fmt.Errorf("%w: worker %d is down (%v)", errUnavailable, w.id, startErr)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.addr+"/handle?"+url.Values{"key": {key}}.Encode(), nil)
	if err != nil {
		return "", err
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w: 502 worker %d: %w", errUnavailable, w.id, err)
	}
	defer resp.Body.Close()
	var rep procReply
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return "", fmt.Errorf("%w: 502 worker %d: %w", errUnavailable, w.id, err)
	}
	p.mu.Lock()
	if rep.Fenced > p.fenced {
		w.fenced.Add(rep.Fenced - p.fenced)
		p.fenced = rep.Fenced
	}
	p.mu.Unlock()
	switch rep.Kind {
	case "ok":
		return rep.Charge, nil
	case "busy":
		return "", errBusy
	case "unknown":
		return "", &unknownAnswer{Retry: rep.Retry, Reason: rep.Err}
	}
	return "", fmt.Errorf("%w: worker %d: %s", errUnavailable, w.id, rep.Err)
}

// killAndRestart SIGKILLs the worker's process, waits until it is gone,
// and starts a new one in the background.
func (w *procWorker) killAndRestart() {
	w.mu.Lock()
	p := w.p
	w.p = nil
	w.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	w.restarts.Go(func() {
		np, err := w.start()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.closed && np != nil {
			np.stop()
			return
		}
		w.p, w.startErr = np, err
	})
}

// Close stops the worker's process: stdin closed, then SIGKILL if it has
// not exited within the shutdown timeout.
func (w *procWorker) Close() {
	w.restarts.Wait()
	w.mu.Lock()
	w.closed = true
	p := w.p
	w.p = nil
	w.mu.Unlock()
	if p != nil {
		p.stop()
	}
	w.hc.CloseIdleConnections()
}

func (p *workerProc) stop() {
	p.stdin.Close()
	t := time.NewTimer(shutdownTimeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
