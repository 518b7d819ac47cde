package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/ctxtime"
	"github.com/idemkit/idem/internal/faultproxy"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// scenario is one failure vector and the implementations it runs against.
type scenario struct {
	name   string
	vector string // how the fault is injected, for the table's legend and the docs
	impls  []impl

	oneKey        bool          // a single key (the burst)
	lease         time.Duration // zero: the lab's lease
	clientsPerKey int           // zero: 1
	timeout       func(lease time.Duration) time.Duration
	pause         func(lease time.Duration) *pausePlan
	plan          func(lease time.Duration) callPlan
	spread        time.Duration // how long the first requests are spread over; zero: the lab's
	// overHTTP puts the provider behind an HTTP server on loopback: a call
	// can be cut, time out, or outlive its caller. payTimeout is then the
	// caller's timeout of one charge (nil: none).
	overHTTP   bool
	payTimeout func(lease time.Duration) time.Duration
	procs      bool // the workers are processes of their own (needs overHTTP)
	// prepare starts the servers of the run and returns the fault to inject;
	// nil: the shared Redis, no fault beyond pause and plan.
	prepare func(ctx context.Context, lb *lab) (runSetup, error)
}

func (s *scenario) keys(def int) int {
	if s.oneKey {
		return 1
	}
	return def
}

// leaseOr returns the scenario's lease, or def when it has none of its own.
func (s *scenario) leaseOr(def time.Duration) time.Duration {
	if s.lease > 0 {
		return s.lease
	}
	return def
}

func (s *scenario) clientTimeout(lease time.Duration) time.Duration {
	if s.timeout != nil {
		return s.timeout(lease)
	}
	return lease * 6 / 10
}

// keyNames returns the keys of a run, def of them unless the scenario has one.
func (s *scenario) keyNames(def int) []string {
	keys := make([]string, s.keys(def))
	for i := range keys {
		keys[i] = "order-" + strconv.Itoa(i)
	}
	return keys
}

// spreadOr returns the scenario's spread, or def.
func (s *scenario) spreadOr(def time.Duration) time.Duration {
	if s.spread > 0 {
		return s.spread
	}
	return def
}

// payTimeoutOr returns the caller's timeout of one charge over HTTP.
func (s *scenario) payTimeoutOr(lease time.Duration) time.Duration {
	if s.payTimeout != nil {
		return s.payTimeout(lease)
	}
	return 0
}

// perKey is how many clients send a key's first requests.
func (s *scenario) perKey() int {
	return max(s.clientsPerKey, 1)
}

// spread is how long the clients' first requests are spread over; faults
// are timed as fractions of it.
func (lb *lab) spread() time.Duration { return time.Duration(lb.keys) * lb.lease / 2 }

var (
	allRedis  = []impl{naive, idemRedis, idemRedisPG}
	withKey   = []impl{naive, idemRedis, idemRedisPG, idemRedisProviderKey}
	withLocal = []impl{naive, idemMemory, idemRedis, idemRedisPG}
	// The vectors of unknown outcomes: idem alone keeps such a key
	// UNKNOWN; with a lookup at the provider it learns what happened.
	withReconcile = []impl{naive, idemRedis, idemRedisPG, idemRedisReconcile}
)

// unknownLease is the lease of the vectors of unknown outcomes. Only
// store-stop is about the lease; the others run with one that a loaded
// machine's work fits in, so that what they show is the fault's.
const unknownLease = time.Second

func scenarios() []*scenario {
	return []*scenario{
		{
			name:   "stall-before",
			vector: "the worker holding the lease freezes for 1.5 leases (code, store calls and heartbeat) before the provider call",
			impls:  []impl{naive, idemMemory, idemRedis, idemRedisPG, idemRedisReconcile},
			pause:  func(L time.Duration) *pausePlan { return &pausePlan{At: beforeProvider, For: L * 3 / 2} },
		},
		{
			name:   "stall-after",
			vector: "the worker freezes for 1.5 leases after the provider charged, before it stores the result",
			impls:  []impl{naive, idemMemory, idemRedis, idemRedisPG, idemRedisProviderKey, idemRedisReconcile},
			pause:  func(L time.Duration) *pausePlan { return &pausePlan{At: afterProvider, For: L * 3 / 2} },
		},
		{
			name:   "release",
			vector: "the lease holder freezes for 1.5 leases; the next owner's provider call is slow; the stalled one's call fails and it releases",
			impls:  []impl{naive, naiveDel, idemRedis, idemRedisPG},
			pause:  func(L time.Duration) *pausePlan { return &pausePlan{At: beforeProvider, For: L * 3 / 2} },
			plan: func(L time.Duration) callPlan {
				return func(n int) (time.Duration, bool) {
					switch n {
					case 0:
						return L * 8 / 10, false
					case 1:
						return 0, true
					}
					return 0, false
				}
			},
		},
		{
			name:    "failover",
			vector:  "own primary + replica; the replication link is cut (writes stop replicating), the primary SIGKILLed, the replica promoted with REPLICAOF NO ONE",
			impls:   withKey,
			prepare: prepareFailover,
		},
		{
			name:    "crash",
			vector:  "own Redis without persistence is SIGKILLed mid-run and restarted empty on the same port",
			impls:   allRedis,
			prepare: prepareCrash,
		},
		{
			name:    "clock-jump",
			vector:  "own Redis under an LD_PRELOAD clock shim; its wall clock jumps 2h forward mid-run",
			impls:   allRedis,
			prepare: prepareClock,
		},
		{
			name:    "lost-replies",
			vector:  "a TCP proxy between workers and Redis swallows every second reply (the command ran) and cuts the connection, for a third of the run",
			impls:   allRedis,
			prepare: prepareProxy(faultproxy.DropEverySecond),
		},
		{
			name:    "delayed-replies",
			vector:  "the proxy delays every reply by 1.5 leases, for a third of the run",
			impls:   allRedis,
			prepare: prepareProxy(faultproxy.Delay),
			// A lease a loaded machine's work fits in, as for the burst: with
			// the default 300 ms, a worker slowed by -race and a busy CPU
			// stores its result after its lease, and a retry runs it again.
			lease: time.Second,
		},
		{
			name:    "pg-kill",
			vector:  "after the charge, the worker's PostgreSQL backend is terminated (pg_terminate_backend) before COMMIT",
			impls:   []impl{idemRedisPG, idemRedisPGProviderKey},
			prepare: preparePGKill,
		},
		{
			name:    "pg-lost-commit",
			vector:  "the reply to the worker's COMMIT is lost (a TCP proxy in front of PostgreSQL cuts the connection): committed, but the worker does not know",
			impls:   []impl{idemRedisPG},
			prepare: preparePGLostCommit,
		},
		{
			name:     "provider-cut",
			vector:   "the provider (an HTTP server on loopback) executes the first call of every key, then cuts the connection before it answers",
			impls:    withReconcile,
			lease:    unknownLease,
			spread:   unknownLease,
			overHTTP: true,
			prepare:  prepareProviderCut,
		},
		{
			name:       "provider-slow",
			vector:     "the provider takes a lease (1 s) over the first call of every key; the caller's timeout is a quarter of it",
			impls:      withReconcile,
			lease:      unknownLease,
			spread:     unknownLease,
			overHTTP:   true,
			payTimeout: func(L time.Duration) time.Duration { return L / 4 },
			plan: func(L time.Duration) callPlan {
				return func(n int) (time.Duration, bool) {
					if n == 0 {
						return L, false
					}
					return 0, false
				}
			},
		},
		{
			name:     "worker-kill",
			vector:   "the workers are processes; once the provider charged the first call of a key, it SIGKILLs the calling worker's process before it answers; the worker is restarted",
			impls:    withReconcile,
			lease:    unknownLease,
			spread:   unknownLease,
			overHTTP: true,
			procs:    true,
			prepare:  prepareWorkerKill,
		},
		{
			name:     "store-stop",
			vector:   "own Redis; the first provider call of the run SIGSTOPs it for 2.5 leases (then SIGCONT) and takes 1.5 leases: the store hangs past the lease mid-request",
			impls:    withReconcile,
			lease:    unknownLease,
			spread:   unknownLease,
			overHTTP: true,
			prepare:  prepareStoreStop,
		},
		{
			name:          "burst",
			vector:        "1,000 concurrent requests for one key, lease 5 s",
			impls:         withLocal,
			oneKey:        true,
			clientsPerKey: 1000,
			// No fault here, only load: the lease must outlast the winner's
			// work while 1,000 clients retry, as a real deployment's does.
			// The lab's 300 ms is shorter than one request can take on a
			// loaded machine (-race, busy cores); a completion that lands
			// after the lease is the stall after the charge, which Redis
			// alone cannot close (see stall-after).
			lease:   5 * time.Second,
			timeout: func(L time.Duration) time.Duration { return 10 * L },
		},
	}
}

func prepareFailover(ctx context.Context, lb *lab) (runSetup, error) {
	primary, err := lb.startRedis(ctx, nil, "--repl-diskless-sync-delay", "0")
	if err != nil {
		return runSetup{}, err
	}
	// The replica replicates through a proxy, so the lab can cut the link:
	// stopping the replica would not do, the kernel would buffer the stream.
	link, err := faultproxy.New(primary.Addr)
	if err != nil {
		primary.Kill()
		return runSetup{}, err
	}
	_, linkPort, _ := net.SplitHostPort(link.Addr())
	replica, err := lb.startRedis(ctx, nil, "--replicaof", "127.0.0.1", linkPort)
	if err != nil {
		primary.Kill()
		link.Close()
		return runSetup{}, err
	}
	cleanup := func() { primary.Kill(); replica.Kill(); link.Close() }
	if err := waitReplicated(ctx, replica.Addr); err != nil {
		cleanup()
		return runSetup{}, err
	}
	ep := &endpoint{}
	ep.set(primary.Addr)
	S := lb.spread()
	fault := func(ctx context.Context) error {
		if err := ctxtime.Sleep(ctx, S/5); err != nil {
			return err
		}
		link.SetMode(faultproxy.Partition) // from here on, writes acknowledged by the primary do not replicate
		if err := ctxtime.Sleep(ctx, S/2); err != nil {
			return err
		}
		primary.Kill()
		c := redis.NewClient(&redis.Options{Addr: replica.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		defer c.Close()
		if err := c.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
			return fmt.Errorf("promote the replica: %w", err)
		}
		ep.set(replica.Addr)
		return nil
	}
	return runSetup{ep: ep, fault: fault, cleanup: cleanup}, nil
}

func prepareCrash(ctx context.Context, lb *lab) (runSetup, error) {
	srv, err := lb.startRedis(ctx, nil)
	if err != nil {
		return runSetup{}, err
	}
	ep := &endpoint{}
	ep.set(srv.Addr)
	S := lb.spread()
	fault := func(ctx context.Context) error {
		if err := ctxtime.Sleep(ctx, S*6/10); err != nil {
			return err
		}
		srv.Kill()
		if err := ctxtime.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
		return srv.Restart(ctx) // same port, empty
	}
	return runSetup{ep: ep, fault: fault, cleanup: srv.Kill}, nil
}

func prepareClock(ctx context.Context, lb *lab) (runSetup, error) {
	shim, err := buildClockShim(ctx)
	if err != nil {
		return runSetup{}, err
	}
	f, err := os.CreateTemp(lb.tmp, "clock-offset-")
	if err != nil {
		return runSetup{}, err
	}
	f.Close()
	offset := f.Name()
	if err := jumpClock(offset, 0); err != nil {
		return runSetup{}, err
	}
	srv, err := lb.startRedis(ctx, []string{"LD_PRELOAD=" + shim, "LAB_CLOCK_OFFSET_FILE=" + offset})
	if err != nil {
		return runSetup{}, err
	}
	ep := &endpoint{}
	ep.set(srv.Addr)
	S := lb.spread()
	fault := func(ctx context.Context) error {
		if err := ctxtime.Sleep(ctx, S/2); err != nil {
			return err
		}
		return jumpClock(offset, 2*time.Hour)
	}
	return runSetup{ep: ep, fault: fault, cleanup: srv.Kill}, nil
}

func prepareProxy(m faultproxy.Mode) func(ctx context.Context, lb *lab) (runSetup, error) {
	return func(ctx context.Context, lb *lab) (runSetup, error) {
		p, err := faultproxy.New(lb.redis.Addr)
		if err != nil {
			return runSetup{}, err
		}
		p.SetDelay(lb.lease * 3 / 2)
		ep := &endpoint{}
		ep.set(p.Addr())
		S := lb.spread()
		fault := func(ctx context.Context) error {
			if err := ctxtime.Sleep(ctx, S/5); err != nil {
				return err
			}
			p.SetMode(m)
			defer p.SetMode(faultproxy.Forward)
			return ctxtime.Sleep(ctx, S/3)
		}
		return runSetup{ep: ep, fault: fault, cleanup: func() { p.Close() }}, nil
	}
}

func preparePGKill(ctx context.Context, lb *lab) (runSetup, error) {
	setup := runSetup{ep: &endpoint{}}
	setup.ep.set(lb.redis.Addr)
	setup.charged = func(ctx context.Context, key string, e Effect) Effect {
		if g, ok := e.(guardEffect); ok {
			lb.pg.pool.Exec(context.WithoutCancel(ctx), `SELECT pg_terminate_backend($1)`, g.pid)
		}
		return e
	}
	return setup, nil
}

func preparePGLostCommit(ctx context.Context, lb *lab) (runSetup, error) {
	cfg := lb.pg.pool.Config().Copy()
	p, err := faultproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	if err != nil {
		return runSetup{}, err
	}
	host, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(n)
	cfg.ConnConfig.Fallbacks = nil
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		p.Close()
		return runSetup{}, err
	}
	setup := runSetup{ep: &endpoint{}, guard: guardLedger{pg: lb.pg, pool: pool}}
	setup.ep.set(lb.redis.Addr)
	setup.cleanup = func() { pool.Close(); p.Close() }
	// The commit that follows the first charge of a key loses its reply:
	// the server commits, the worker gets an error.
	var mu sync.Mutex
	setup.charged = func(ctx context.Context, key string, e Effect) Effect {
		g, ok := e.(guardEffect)
		if !ok {
			return e
		}
		g.atCommit = func(before bool) {
			if before {
				mu.Lock() // one lost commit at a time
				p.SetMode(faultproxy.DropAll)
				return
			}
			p.SetMode(faultproxy.Forward)
			mu.Unlock()
		}
		return g
	}
	return setup, nil
}

func prepareProviderCut(ctx context.Context, lb *lab) (runSetup, error) {
	setup := runSetup{ep: &endpoint{}}
	setup.ep.set(lb.redis.Addr)
	setup.afterCharge = func(ev chargeEvent, _ func(int)) bool { return ev.First }
	return setup, nil
}

func prepareWorkerKill(ctx context.Context, lb *lab) (runSetup, error) {
	setup := runSetup{ep: &endpoint{}}
	setup.ep.set(lb.redis.Addr)
	setup.afterCharge = func(ev chargeEvent, kill func(int)) bool {
		if !ev.First {
			return false
		}
		kill(ev.Worker) // the charge is made; its worker dies before it hears of it
		return true
	}
	return setup, nil
}

// storeStopWait bounds how long store-stop waits for the first provider call.
const storeStopWait = 30 * time.Second

func prepareStoreStop(ctx context.Context, lb *lab) (runSetup, error) {
	srv, err := lb.startRedis(ctx, nil)
	if err != nil {
		return runSetup{}, err
	}
	setup := runSetup{ep: &endpoint{}, cleanup: srv.Kill} // Kill continues a stopped server first
	setup.ep.set(srv.Addr)
	L := unknownLease
	stopped := make(chan struct{})
	var once sync.Once
	setup.plan = func(int) (time.Duration, bool) {
		var d time.Duration
		once.Do(func() {
			if srv.Pause() == nil {
				close(stopped)
				d = L * 3 / 2
			}
		})
		return d, false
	}
	setup.fault = func(ctx context.Context) error {
		t := time.NewTimer(storeStopWait)
		defer t.Stop()
		select {
		case <-stopped:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return errors.New("no provider call came to stop the store on")
		}
		err := ctxtime.Sleep(ctx, L*5/2)
		return errors.Join(err, srv.Resume())
	}
	return setup, nil
}
