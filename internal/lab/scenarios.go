package lab

import (
	"context"
	"strconv"
	"time"

	"github.com/idemkit/idem/internal/faultproxy"
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
