package check

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/faultproxy"
	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
)

// lease is the engines' lease in every run: short, so that stalls, pauses
// and crashes outlast it often.
const lease = 300 * time.Millisecond

// work is the workload of a configuration on one server: a number of
// steps and faults drawn from the run's seed, not a time, so that a
// loaded machine does as much and a mutation shows as often (about what
// 4 s did on 2 quiet cores).
var work = Workload{Clients: 8, Keys: 48, Processes: 3, Steps: 60, Faults: 8, Lease: lease}

// topoWork is the workload on a replicated topology: longer, since a
// failover takes seconds.
var topoWork = Workload{Clients: 8, Keys: 48, Processes: 3, Duration: 6 * time.Second, Lease: lease}

// productWork is the product check's workload: its keys and tenants are
// its own (productEnv.prepare); a run is a number of steps and faults
// drawn from its seed, not a time, so that a loaded machine does as much.
var productWork = Workload{Clients: 8, Steps: 40, Faults: 4, Lease: productLease}

// configs are the configurations of the campaign, in the order of
// docs/checking.md.
func configs() []config {
	return []config{
		{name: "memory", promise: "safe", setup: memoryEnv, work: work},
		{name: "redis", promise: "safe", setup: redisEnv(""), work: work},
		{name: "redis-coalesce", promise: "safe", setup: redisEnv("coalesce=on"), work: work},
		{name: "redis-nearcache", promise: "safe", setup: redisEnv("near_cache=on&coalesce=on"), work: work},
		{name: "sentinel-acks", promise: "narrowed", setup: sentinelEnv(2), work: topoWork},
		{name: "cluster-acks", promise: "narrowed", setup: clusterEnv(1), work: topoWork},
		{name: "postgres", promise: "safe", setup: pgEnv, work: work},
		{name: "gateways", promise: "safe", setup: gatewayEnv, work: work},
		{name: "product", promise: "safe", setup: productEnvSetup, work: productWork, short: productProfiles},
		{name: "layered", promise: "safe", setup: layeredEnv, work: work},
		{name: "redis-nopersist", promise: "unsafe", setup: redisNoPersistEnv, work: work},
		{name: "sentinel-noacks", promise: "unsafe", setup: sentinelEnv(0), work: topoWork},
	}
}

// memoryEnv: one memory store shared by the processes (goroutines of one
// binary), whose clock jumps back and forth by up to 5 minutes.
func memoryEnv(t *testing.T) *Env {
	clock := &JumpClock{}
	var s *memstore.Store
	return &Env{
		NewStore: func(ctx context.Context, prefix string) (store.Store, func(), error) {
			return s, func() {}, nil
		},
		Nemeses: []Nemesis{ClockJump{Clock: clock, Max: 5 * time.Minute}},
		StartRun: func() error {
			var err error
			s, err = memstore.New(&memstore.Options{Clock: clock.Now})
			return err
		},
	}
}

// privateRedis starts a redis-server of the test's own, with args, behind
// a fault proxy, both stopped when t ends.
func privateRedis(t *testing.T, name string, args ...string) (*redisproc.Server, *faultproxy.Proxy) {
	t.Helper()
	s, err := redisproc.Start(t.Context(), redisproc.Config{Dir: filepath.Join(t.TempDir(), name), Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s, proxyTo(t, s.Addr)
}

// proxyTo starts a fault proxy in front of addr, closed when t ends.
func proxyTo(t *testing.T, addr string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// serverNemeses are the faults of one server process of the harness's
// own behind a fault proxy.
func serverNemeses(what string, s Process, p *faultproxy.Proxy) []Nemesis {
	return []Nemesis{
		Pause{What: what, P: s},
		Crash{What: what, P: s},
		Net{What: what, Proxy: p, Mode: faultproxy.DropEverySecond},
		Net{What: what, Proxy: p, Mode: faultproxy.Delay, Delay: lease / 2},
		Net{What: what, Proxy: p, Mode: faultproxy.Partition},
	}
}

// staleness bounds how long a near cache may replay a deleted record: the
// delivery of the invalidation, held back by the proxy's delay.
const staleness = lease/2 + 100*time.Millisecond

// redisEnv: one redis-server with the append-only file fsynced at every
// write (so a crash loses no acknowledged write), behind the fault proxy;
// query adds store URL options (coalesce, near_cache).
func redisEnv(query string) func(t *testing.T) *Env {
	return func(t *testing.T) *Env {
		s, p := privateRedis(t, "redis", "--appendonly", "yes", "--appendfsync", "always")
		env := &Env{NewStore: openRedis(p.Addr(), query), Nemeses: serverNemeses("redis", s, p)}
		if strings.Contains(query, "near_cache=on") {
			env.Staleness = staleness
		}
		return env
	}
}

// redisNoPersistEnv: Redis without persistence, crashed and restarted
// empty: it forgets what it acknowledged (expected unsafe).
func redisNoPersistEnv(t *testing.T) *Env {
	s, p := privateRedis(t, "redis")
	return &Env{NewStore: openRedis(p.Addr(), ""), Nemeses: []Nemesis{Crash{What: "redis without persistence", P: s}}}
}

func openRedis(addr, query string) func(ctx context.Context, prefix string) (store.Store, func(), error) {
	return func(ctx context.Context, prefix string) (store.Store, func(), error) {
		uri := "redis://" + addr
		if query != "" {
			uri += "?" + query
		}
		st, err := redisstore.OpenURL(uri, &redisstore.Options{Prefix: prefix})
		if err != nil {
			return nil, nil, err
		}
		return st, func() { _ = st.Close() }, nil
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
