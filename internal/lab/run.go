package lab

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
)

const workersPerRun = 3

// lab holds what every run of one Main shares.
type lab struct {
	redis    *redis.Options    // the shared Redis
	ownRedis *redisproc.Server // the shared Redis when the lab started it; nil otherwise
	pg       *pgLab
	pgURL    string // for worker processes
	tmp      string // a temp dir for the servers the lab starts
	lease    time.Duration
	keys     int
}

// runSetup is what a scenario prepares for one run.
type runSetup struct {
	ep      *endpoint
	guard   Ledger                                                 // nil: the guarded ledger on the lab's pool
	charged func(ctx context.Context, key string, e Effect) Effect // nil: nothing; called once per key after its first charge, returns the effect to commit
	fault   func(ctx context.Context) error                        // injected while clients run; nil: none
	cleanup func()
	// plan, when not nil, replaces the scenario's plan of provider calls.
	plan callPlan
	// afterCharge, when not nil, is told by the provider's server (a
	// scenario with overHTTP) of every call that charged, before the
	// answer; true cuts the connection instead. kill SIGKILLs a worker
	// process (a scenario with procs) and starts a new one.
	afterCharge func(ev chargeEvent, kill func(worker int)) (cut bool)
}

// runOne runs one scenario with one implementation and checks it: the
// scenario's servers, the workers, the clients while the fault hits, one
// last read of every key, and the check of the history.
func (lb *lab) runOne(ctx context.Context, sc *scenario, im impl) (Counts, error) {
	lease := cmp.Or(sc.lease, lb.lease)
	setup, err := lb.prepare(ctx, sc)
	if err != nil {
		return Counts{}, err
	}
	if setup.cleanup != nil {
		defer setup.cleanup()
	}
	env, err := lb.newWorkerEnv(sc, im, setup, lease)
	if err != nil {
		return Counts{}, err
	}
	var kills killSwitch
	closePay := func() {}
	if sc.overHTTP {
		srv, err := startPayServer(env.Provider, func(ev chargeEvent) bool {
			return setup.afterCharge != nil && setup.afterCharge(ev, kills.kill)
		})
		if err != nil {
			return Counts{}, err
		}
		closePay = sync.OnceFunc(srv.close)
		defer closePay()
		pc := newPayClient(srv.url, sc.payTimeoutOr(lease))
		defer pc.close()
		env.Pay, env.payURL = pc, srv.url
	}
	workers, err := lb.startWorkers(sc, im, env, setup.ep, &kills)
	if err != nil {
		return Counts{}, err
	}
	defer closeWorkers(workers)
	r := &runner{env: env, workers: workers, hist: &history{}, clientTimeout: sc.clientTimeout(lease)}
	keys := sc.keyNames(lb.keys)
	if err := r.clientsUnderFault(ctx, keys, sc.perKey(), cmp.Or(sc.spread, lb.spread()), setup.fault); err != nil {
		return Counts{}, fmt.Errorf("lab: %s: injecting the fault: %w", sc.name, err)
	}
	r.finalRead(ctx, keys, len(keys)*sc.perKey())
	closePay() // every provider call has ended: a slow one may still have charged
	return r.check(ctx, keys)
}

// killSwitch lets the provider's server kill a worker process of the run,
// once the workers have started.
type killSwitch struct {
	mu      sync.Mutex
	workers []worker
}

func (k *killSwitch) set(ws []worker) { k.mu.Lock(); k.workers = ws; k.mu.Unlock() }

func (k *killSwitch) kill(id int) {
	k.mu.Lock()
	ws := k.workers
	k.mu.Unlock()
	if id >= 0 && id < len(ws) {
		if pw, ok := ws[id].(*procWorker); ok {
			pw.killAndRestart()
		}
	}
}

// prepare starts the scenario's servers; without a prepare of its own a
// scenario runs on the shared Redis.
func (lb *lab) prepare(ctx context.Context, sc *scenario) (runSetup, error) {
	if sc.prepare != nil {
		return sc.prepare(ctx, lb)
	}
	setup := runSetup{ep: newEndpoint(lb.redis.Addr)}
	return setup, nil
}

// newWorkerEnv builds what the workers of one run share: a fresh tenant and
// key prefix, the provider, the scenario's pause, the ledger the
// implementation writes to, and its Redis clients or memory store.
func (lb *lab) newWorkerEnv(sc *scenario, im impl, setup runSetup, lease time.Duration) (*workerEnv, error) {
	env := &workerEnv{
		Tenant:    "run-" + strings.ToLower(rand.Text()[:10]),
		Prefix:    "idemlab:" + rand.Text()[:10] + ":",
		Lease:     lease,
		Provider:  newProvider(im.providerKey, nil),
		Reconcile: im.reconcile,
		Ledger:    plainLedger{lb.pg},
		Fenced:    new(atomic.Int64),
		NewRedis:  redisClients(lb.redis, setup.ep),
	}
	env.Pay = env.Provider
	if sc.plan != nil {
		env.Provider.plan = sc.plan(lease)
	}
	if setup.plan != nil {
		env.Provider.plan = setup.plan
	}
	env.payTimeout = sc.payTimeoutOr(lease)
	if sc.pause != nil {
		env.Pause = sc.pause(lease)
	}
	if im.guardrail {
		env.Ledger = guardLedger{pg: lb.pg, pool: lb.pg.pool}
		if setup.guard != nil {
			env.Ledger = setup.guard
		}
	}
	if setup.charged != nil {
		env.Charged = firstChargeOnly(setup.charged)
	}
	if im.store == memoryStore {
		m, err := memstore.New(nil)
		if err != nil {
			return nil, err
		}
		env.Memory = m
	}
	return env, nil
}

// firstChargeOnly calls charged for the first charge of each key only; the
// later ones commit their effect unchanged.
func firstChargeOnly(charged func(ctx context.Context, key string, e Effect) Effect) func(ctx context.Context, key string, e Effect) Effect {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(ctx context.Context, key string, e Effect) Effect {
		mu.Lock()
		first := !seen[key]
		seen[key] = true
		mu.Unlock()
		if !first {
			return e
		}
		return charged(ctx, key, e)
	}
}

// redisClients returns a constructor of the workers' Redis clients on
// base: short timeouts, no retries of their own, calls that end at their
// context's deadline, and each dial to where ep points now (a failover
// moves it).
func redisClients(base *redis.Options, ep *endpoint) func() *redis.Client {
	return func() *redis.Client {
		o := *base
		o.MaxRetries = -1
		o.PoolSize = 32
		o.DialTimeout = time.Second
		o.ReadTimeout = 2 * time.Second
		o.WriteTimeout = time.Second
		o.ContextTimeoutEnabled = true // a call ends at its context's deadline, as idem's own clients do
		d := &net.Dialer{Timeout: time.Second}
		o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", ep.get())
		}
		return redis.NewClient(&o)
	}
}

// startWorkers starts the run's workers, goroutines or (sc.procs)
// processes, or none when one fails to start.
func (lb *lab) startWorkers(sc *scenario, im impl, env *workerEnv, ep *endpoint, kills *killSwitch) ([]worker, error) {
	workers := make([]worker, 0, workersPerRun)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for i := range workersPerRun {
		wg.Go(func() {
			var w worker
			var err error
			if sc.procs {
				w, err = startProcWorker(i, lb.procConfig(im, env, ep), env.Fenced)
			} else {
				w, err = newWorker(im, i, env)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			workers = append(workers, w)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		closeWorkers(workers)
		return nil, errors.Join(errs...)
	}
	slices.SortFunc(workers, func(a, b worker) int { return workerID(a) - workerID(b) })
	kills.set(workers)
	return workers, nil
}

// workerID is the id a worker was started with.
func workerID(w worker) int {
	switch w := w.(type) {
	case *procWorker:
		return w.id
	case *naiveWorker:
		return w.id
	case *idemWorker:
		return w.id
	}
	return 0
}

// procConfig is what a worker process of im is told about the run.
func (lb *lab) procConfig(im impl, env *workerEnv, ep *endpoint) procConfig {
	return procConfig{Impl: im.name, Tenant: env.Tenant, Prefix: env.Prefix, Lease: env.Lease,
		RedisAddr: ep.get(), RedisDB: lb.redis.DB, RedisUsername: lb.redis.Username, RedisPassword: lb.redis.Password,
		PostgresURL: lb.pgURL, Schema: lb.pg.schema, PayURL: env.payURL, PayTimeout: env.payTimeout}
}

func closeWorkers(workers []worker) {
	for _, w := range workers {
		w.Close()
	}
}

// clientsUnderFault sends the first requests of every key, spread over
// spread, while the scenario injects its fault, and waits for the clients,
// for the fault and for every request still in flight (a request whose
// client gave up still runs to its end).
func (r *runner) clientsUnderFault(ctx context.Context, keys []string, perKey int, spread time.Duration, fault func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	faultErr := make(chan error, 1)
	go func() {
		if fault == nil {
			faultErr <- nil
			return
		}
		faultErr <- fault(ctx)
	}()
	var clients sync.WaitGroup
	start := time.Now()
	budget := spread + 12*r.env.Lease + 2*time.Second
	for i, k := range keys {
		at := start.Add(spread * time.Duration(i) / time.Duration(len(keys)))
		for j := range perKey {
			clients.Go(func() {
				time.Sleep(time.Until(at))
				r.client(ctx, i*perKey+j, k, time.Now().Add(budget))
			})
		}
	}
	clients.Wait()
	err := <-faultErr
	if err != nil {
		cancel()
	}
	r.inflight.Wait()
	return err
}

// finalRead sends one more client per key, after the fault, to ask again;
// their ids start at firstID.
func (r *runner) finalRead(ctx context.Context, keys []string, firstID int) {
	var clients sync.WaitGroup
	for i, k := range keys {
		clients.Go(func() {
			r.client(ctx, firstID+i, k, time.Now().Add(4*r.env.Lease+2*time.Second))
		})
	}
	clients.Wait()
	r.inflight.Wait()
}

// check reads the run's ledger and checks the history against it and
// against the provider's calls.
func (r *runner) check(ctx context.Context, keys []string) (Counts, error) {
	rows, err := r.env.Ledger.Rows(ctx, r.env.Tenant)
	if err != nil {
		return Counts{}, fmt.Errorf("lab: read the ledger: %w", err)
	}
	return check(keys, r.hist.all(), r.env.Provider.Calls(), rows, int(r.env.Fenced.Load())), nil
}

// runner sends the clients' requests to the workers.
type runner struct {
	env           *workerEnv
	workers       []worker
	hist          *history
	clientTimeout time.Duration
	inflight      sync.WaitGroup
}

type reply struct {
	result string
	err    error
}

// client sends requests for key until one succeeds, retrying with the same
// key on 409, 5xx and timeouts, each time to the next worker, until deadline.
func (r *runner) client(ctx context.Context, id int, key string, deadline time.Time) {
	backoff := r.env.Lease / 8
	for attempt := 0; attempt < 60 && time.Now().Before(deadline) && ctx.Err() == nil; attempt++ {
		wid := (id + attempt) % len(r.workers)
		w := r.workers[wid]
		r.hist.add(Op{Type: OpInvoke, Client: id, Key: key, Worker: wid})
		done := make(chan reply, 1)
		r.inflight.Add(1)
		go func() {
			defer r.inflight.Done()
			res, err := w.Handle(ctx, key)
			done <- reply{res, err}
		}()
		t := time.NewTimer(r.clientTimeout)
		select {
		case rep := <-done:
			t.Stop()
			var unknown *unknownAnswer
			switch {
			case rep.err == nil:
				r.hist.add(Op{Type: OpOK, Client: id, Key: key, Worker: wid, Result: rep.result})
				return
			case errors.As(rep.err, &unknown):
				// The work may have run: Jepsen's info, as the worker said.
				r.hist.add(Op{Type: OpInfo, Client: id, Key: key, Worker: wid, Result: rep.err.Error(), Told: true})
				if !unknown.Retry {
					return // it stays UNKNOWN until an operator resolves it
				}
			default:
				r.hist.add(Op{Type: OpFail, Client: id, Key: key, Worker: wid, Result: rep.err.Error()})
			}
		case <-t.C:
			r.hist.add(Op{Type: OpInfo, Client: id, Key: key, Worker: wid, Result: "client timeout"})
		}
		time.Sleep(backoff/2 + mrand.N(backoff))
	}
}

// newWorker starts worker id of implementation im.
func newWorker(im impl, id int, env *workerEnv) (worker, error) {
	g := &gate{}
	switch im.store {
	case naiveLock:
		return &naiveWorker{id: id, env: env, rdb: env.NewRedis(), g: g, del: im.blindDel}, nil
	case memoryStore:
		eng, err := newEngine(gatedStore{env.Memory, g}, env)
		return &idemWorker{id: id, env: env, eng: eng, g: g}, err
	case redisStore:
		rdb := env.NewRedis()
		st, err := redisstore.New(rdb, &redisstore.Options{Prefix: env.Prefix})
		if err != nil {
			rdb.Close()
			return nil, err
		}
		eng, err := newEngine(gatedStore{st, g}, env)
		if err != nil {
			rdb.Close()
			return nil, err
		}
		return &idemWorker{id: id, env: env, eng: eng, g: g, rdb: rdb}, nil
	}
	return nil, fmt.Errorf("lab: implementation %s has no store kind", im)
}

// reconcileTimeout bounds one lookup at the provider; the engine's claim
// on the key lasts 2 s longer, so a lookup that answered "still running"
// is asked again that much later.
const reconcileTimeout = 2 * time.Second

// newEngine returns a worker's engine: the run's lease, and with
// env.Reconcile a lookup at the provider for keys whose outcome is unknown.
func newEngine(s store.Store, env *workerEnv) (*idem.Engine, error) {
	o := &idem.Options{LeaseDuration: env.Lease, Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	if env.Reconcile {
		o.Reconcile, o.ReconcileTimeout = reconcileWith(env.Pay), reconcileTimeout
	}
	return idem.New(s, o)
}
