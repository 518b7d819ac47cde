package lab

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// Implementations a scenario can run.
const (
	implNaive       = "naive"                   // SET lock NX EX, blind SET of the response
	implNaiveDel    = "naive-del"               // the same, plus a blind DEL of the lock at the end
	implIdemMemory  = "idem-memory"             // idem on store/memstore, shared in-process
	implIdemRedis   = "idem-redis"              // idem on store/redisstore
	implIdemRedisPG = "idem-redis+pg"           // idem on Redis plus the PostgreSQL ledger guardrail
	implProviderKey = "idem-redis+provider-key" // idem-redis, and the provider deduplicates by key
	implPGKey       = "idem-redis+pg+provider-key"
)

const workersPerRun = 3

// lab holds what every run of one Main shares.
type lab struct {
	redis *redis.Options // the shared Redis
	pg    *pgLab
	tmp   string // a temp dir for the servers the lab starts
	lease time.Duration
	keys  int
}

// runSetup is what a scenario prepares for one run.
type runSetup struct {
	ep      *endpoint
	guard   Ledger                                                 // nil: the guarded ledger on the lab's pool
	charged func(ctx context.Context, key string, e Effect) Effect // nil: nothing; called once per key after its first charge, returns the effect to commit
	fault   func(ctx context.Context) error                        // injected while clients run; nil: none
	cleanup func()
}

// runOne runs one scenario with one implementation and checks it.
func (lb *lab) runOne(ctx context.Context, sc *scenario, impl string) (Counts, error) {
	L := sc.leaseOr(lb.lease)
	setup := runSetup{ep: &endpoint{}}
	setup.ep.set(lb.redis.Addr)
	if sc.prepare != nil {
		var err error
		if setup, err = sc.prepare(ctx, lb); err != nil {
			return Counts{}, err
		}
	}
	if setup.cleanup != nil {
		defer setup.cleanup()
	}
	env := &workerEnv{
		Tenant:   "run-" + strings.ToLower(rand.Text()[:10]),
		Prefix:   "idemlab:" + rand.Text()[:10] + ":",
		Lease:    L,
		Provider: newProvider(strings.HasSuffix(impl, "+provider-key"), nil),
		Fenced:   new(atomic.Int64),
	}
	if sc.plan != nil {
		env.Provider.plan = sc.plan(L)
	}
	if sc.pause != nil {
		env.Pause = sc.pause(L)
	}
	env.Ledger = plainLedger{lb.pg}
	if strings.HasPrefix(impl, implIdemRedisPG) {
		env.Ledger = guardLedger{pg: lb.pg, pool: lb.pg.pool}
		if setup.guard != nil {
			env.Ledger = setup.guard
		}
	}
	if setup.charged != nil {
		var mu sync.Mutex
		seen := map[string]bool{}
		env.Charged = func(ctx context.Context, key string, e Effect) Effect {
			mu.Lock()
			first := !seen[key]
			seen[key] = true
			mu.Unlock()
			if !first {
				return e
			}
			return setup.charged(ctx, key, e)
		}
	}
	env.NewRedis = func() *redis.Client {
		o := *lb.redis
		o.MaxRetries = -1
		o.PoolSize = 32
		o.DialTimeout = time.Second
		o.ReadTimeout = 2 * time.Second
		o.WriteTimeout = time.Second
		d := &net.Dialer{Timeout: time.Second}
		o.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", setup.ep.get())
		}
		return redis.NewClient(&o)
	}
	if impl == implIdemMemory {
		m, err := memstore.New(nil)
		if err != nil {
			return Counts{}, err
		}
		env.Memory = m
	}
	workers := make([]worker, workersPerRun)
	for i := range workers {
		w, err := newWorker(impl, i, env)
		if err != nil {
			return Counts{}, err
		}
		workers[i] = w
		defer w.Close()
	}

	keys := make([]string, sc.keys(lb.keys))
	for i := range keys {
		keys[i] = "order-" + strconv.Itoa(i)
	}
	r := &runner{env: env, workers: workers, hist: &history{}, clientTimeout: sc.clientTimeout(L)}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	spread := lb.spread()
	faultErr := make(chan error, 1)
	go func() {
		if setup.fault == nil {
			faultErr <- nil
			return
		}
		faultErr <- setup.fault(runCtx)
	}()
	var clients sync.WaitGroup
	budget := spread + 12*L + 2*time.Second
	perKey := sc.clientsPerKey
	if perKey == 0 {
		perKey = 1
	}
	for i, k := range keys {
		for j := range perKey {
			client := i*perKey + j
			at := start.Add(spread * time.Duration(i) / time.Duration(len(keys)))
			clients.Add(1)
			go func() {
				defer clients.Done()
				time.Sleep(time.Until(at))
				r.client(runCtx, client, k, time.Now().Add(budget))
			}()
		}
	}
	clients.Wait()
	if err := <-faultErr; err != nil {
		cancel()
		r.inflight.Wait()
		return Counts{}, fmt.Errorf("lab: %s: injecting the fault: %w", sc.name, err)
	}
	r.inflight.Wait() // requests whose client gave up still run to their end
	// The final read: one more client per key, after the fault, asks again.
	for i, k := range keys {
		clients.Add(1)
		go func() {
			defer clients.Done()
			r.client(runCtx, len(keys)*perKey+i, k, time.Now().Add(4*L+2*time.Second))
		}()
	}
	clients.Wait()
	r.inflight.Wait()
	rows, err := env.Ledger.Rows(ctx, env.Tenant)
	if err != nil {
		return Counts{}, fmt.Errorf("lab: read the ledger: %w", err)
	}
	return check(keys, r.hist.all(), env.Provider.Calls(), rows, int(env.Fenced.Load())), nil
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
			if rep.err == nil {
				r.hist.add(Op{Type: OpOK, Client: id, Key: key, Worker: wid, Result: rep.result})
				return
			}
			r.hist.add(Op{Type: OpFail, Client: id, Key: key, Worker: wid, Result: rep.err.Error()})
		case <-t.C:
			r.hist.add(Op{Type: OpInfo, Client: id, Key: key, Worker: wid, Result: "client timeout"})
		}
		time.Sleep(backoff/2 + mrand.N(backoff))
	}
}

func newWorker(impl string, id int, env *workerEnv) (worker, error) {
	g := &gate{}
	switch impl {
	case implNaive, implNaiveDel:
		return &naiveWorker{id: id, env: env, rdb: env.NewRedis(), g: g, del: impl == implNaiveDel}, nil
	case implIdemMemory:
		eng, err := newEngine(gatedStore{env.Memory, g}, env.Lease)
		return &idemWorker{id: id, env: env, eng: eng, g: g}, err
	case implIdemRedis, implIdemRedisPG, implProviderKey, implPGKey:
		rdb := env.NewRedis()
		st, err := redisstore.New(rdb, &redisstore.Options{Prefix: env.Prefix})
		if err != nil {
			rdb.Close()
			return nil, err
		}
		eng, err := newEngine(gatedStore{st, g}, env.Lease)
		if err != nil {
			rdb.Close()
			return nil, err
		}
		return &idemWorker{id: id, env: env, eng: eng, g: g, rdb: rdb}, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownImpl, impl)
}

// ErrUnknownImpl: an implementation name the lab does not know.
var ErrUnknownImpl = errors.New("lab: unknown implementation")

func newEngine(s idem.Store, lease time.Duration) (*idem.Engine, error) {
	return idem.New(s, &idem.Options{LeaseDuration: lease, Retention: time.Hour, Logger: slog.New(slog.DiscardHandler)})
}
