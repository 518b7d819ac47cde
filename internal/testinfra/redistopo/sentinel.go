package redistopo

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// MasterName is the name the Sentinels of a Sentinel topology monitor.
const MasterName = "idemtest"

// Sentinel is a primary with replicas, watched by Sentinels that promote a
// replica when the primary is down for a second.
type Sentinel struct {
	// Primary is the primary as started; after a failover another node
	// is the primary (ask CurrentPrimary).
	Primary *Server
	// Replicas are the replicas as started.
	Replicas []*Server
	// Sentinels are the Sentinel processes.
	Sentinels []*Server
}

// StartSentinel starts a primary, replicas replicas of it and sentinels
// Sentinels (quorum: a majority of them) and waits until every replica is
// in sync and every Sentinel knows every replica and the other Sentinels.
func StartSentinel(t testing.TB, replicas, sentinels int) *Sentinel {
	t.Helper()
	binaries(t, "redis-server")
	s := &Sentinel{Primary: start(t, "primary", redisproc.Config{})}
	for i := range replicas {
		s.Replicas = append(s.Replicas, start(t, "replica-"+strconv.Itoa(i), redisproc.Config{Args: []string{
			"--replicaof", "127.0.0.1", strconv.Itoa(s.Primary.Port)}}))
	}
	pc := Client(t, s.Primary)
	waitFor(t, "replicas in sync", func(ctx context.Context) (bool, error) {
		got, err := redisproc.InfoField(ctx, pc, "replication", "connected_slaves")
		return got == strconv.Itoa(replicas), err
	})
	for _, r := range s.Replicas {
		rc := Client(t, r)
		waitFor(t, "replica link up on "+r.Addr, func(ctx context.Context) (bool, error) {
			link, err := redisproc.InfoField(ctx, rc, "replication", "master_link_status")
			return link == "up", err
		})
	}
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n"+
		"sentinel down-after-milliseconds %[1]s 1000\n"+
		"sentinel failover-timeout %[1]s 5000\n"+
		"sentinel parallel-syncs %[1]s 2\n", MasterName, s.Primary.Port, sentinels/2+1)
	for i := range sentinels {
		s.Sentinels = append(s.Sentinels, start(t, "sentinel-"+strconv.Itoa(i), redisproc.Config{SentinelConf: conf}))
	}
	for _, sn := range s.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr, MaxRetries: -1})
		t.Cleanup(func() { sc.Close() })
		waitFor(t, "sentinel "+sn.Addr+" sees the topology", func(ctx context.Context) (bool, error) {
			m, err := sc.Master(ctx, MasterName).Result()
			if err != nil {
				return false, err
			}
			return m["num-slaves"] == strconv.Itoa(replicas) && m["num-other-sentinels"] == strconv.Itoa(sentinels-1), nil
		})
	}
	return s
}

// SentinelAddrs returns the addresses of the Sentinels.
func (s *Sentinel) SentinelAddrs() []string { return addrs(s.Sentinels) }

// Client returns a Sentinel-aware failover client of the monitored
// primary, closed when t ends.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.SentinelAddrs(), PoolSize: 64, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// CurrentPrimary returns the address of the primary as the first
// reachable Sentinel reports it.
func (s *Sentinel) CurrentPrimary(ctx context.Context) (string, error) {
	var lastErr error
	for _, sn := range s.Sentinels {
		if !sn.Alive() {
			continue
		}
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr, MaxRetries: -1})
		addr, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
		sc.Close()
		if err == nil && len(addr) == 2 {
			return addr[0] + ":" + addr[1], nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("redistopo: no Sentinel answered: %v", lastErr)
}

// Node returns the data node (primary or replica) with address addr, or nil.
func (s *Sentinel) Node(addr string) *Server {
	for _, n := range append([]*Server{s.Primary}, s.Replicas...) {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}
