package check

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/redistopo"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// failoverTimeout bounds a promotion, and the return of a killed node as
// an in-sync replica.
const failoverTimeout = time.Minute

// poll runs cond every 50ms until it holds or failoverTimeout passes.
func poll(ctx context.Context, what string, cond func(ctx context.Context) (bool, error)) error {
	deadline := time.Now().Add(failoverTimeout)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ok, err := cond(cctx)
		cancel()
		if ok {
			return nil
		}
		last = err
		sleep(ctx, 50*time.Millisecond)
	}
	return fmt.Errorf("%s did not happen within %v (last error: %v)", what, failoverTimeout, last)
}

func info(ctx context.Context, addr, section, field string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	return redisproc.InfoField(ctx, c, section, field)
}

// inSync: the node at addr is a replica whose link to its primary is up.
func inSync(ctx context.Context, addr string) (bool, error) {
	link, err := info(ctx, addr, "replication", "master_link_status")
	return link == "up", err
}

// SentinelFailover crashes the Sentinels' current primary; with LinkLoss,
// the replicas first stall (SIGSTOP) and lose their connections (CLIENT
// KILL TYPE replica) for a lease, so the primary acknowledges writes no
// replica has when it dies: asynchronous replication's window, made wide.
// It heals once a replica is promoted and the old primary is back as a
// replica.
type SentinelFailover struct {
	Topo     *redistopo.Sentinel
	LinkLoss bool
	Last     *atomic.Int64 // when the last failover began (unix ns), for Settle
}

// Name implements Nemesis.
func (n SentinelFailover) Name() string {
	if n.LinkLoss {
		return "sentinel failover after link loss"
	}
	return "sentinel failover"
}

// Inject implements Nemesis.
func (n SentinelFailover) Inject(ctx context.Context, _ *rand.Rand) (func() error, error) {
	old, err := n.Topo.CurrentPrimary(ctx)
	if err != nil {
		return nil, err
	}
	primary := n.Topo.Node(old)
	if primary == nil {
		return nil, fmt.Errorf("the primary %s is no node of the topology", old)
	}
	var replicas []*redisproc.Server
	for _, r := range append([]*redisproc.Server{n.Topo.Primary}, n.Topo.Replicas...) {
		if r != primary {
			replicas = append(replicas, r)
		}
	}
	if n.LinkLoss {
		for _, r := range replicas {
			if err := r.Pause(); err != nil {
				return nil, err
			}
		}
		c := redis.NewClient(&redis.Options{Addr: old, MaxRetries: -1})
		err := c.Do(ctx, "client", "kill", "type", "replica").Err()
		c.Close()
		if err != nil {
			return nil, err
		}
		sleep(ctx, lease)
	}
	primary.Kill()
	n.Last.Store(time.Now().UnixNano())
	for _, r := range replicas {
		if n.LinkLoss {
			_ = r.Resume()
		}
	}
	return func() error {
		ctx := context.Background()
		if err := poll(ctx, "a promotion", func(ctx context.Context) (bool, error) {
			addr, err := n.Topo.CurrentPrimary(ctx)
			return err == nil && addr != old, err
		}); err != nil {
			return err
		}
		if err := primary.Restart(ctx); err != nil {
			return err
		}
		return poll(ctx, "the old primary back as a replica", func(ctx context.Context) (bool, error) { return inSync(ctx, old) })
	}, nil
}

// sentinelEnv: a primary with two replicas under three Sentinels; acks
// is Options.ReplicaAcks (2: every replica, which docs/stores.md says
// closes the window a failover promoting a replica that missed a write
// leaves open). Without acks only the failover after link loss
// runs: the one that must lose writes.
func sentinelEnv(acks int) func(t *testing.T) *Env {
	return func(t *testing.T) *Env {
		topo := redistopo.StartSentinel(t, 2, 3)
		uri := "redis-sentinel://" + strings.Join(topo.SentinelAddrs(), ",") + "/" + redistopo.MasterName
		last := &atomic.Int64{}
		nemeses := []Nemesis{SentinelFailover{Topo: topo, LinkLoss: true, Last: last}}
		if acks > 0 {
			nemeses = append(nemeses, SentinelFailover{Topo: topo, Last: last})
		}
		return &Env{
			// A Sentinel starts no failover of a master within twice its
			// failover timeout (5s here) of the last: the next run's must
			// not wait for it.
			Settle: func(ctx context.Context) error {
				sleep(ctx, time.Until(time.Unix(0, last.Load()).Add(11*time.Second)))
				return nil
			},
			NewStore: func(ctx context.Context, prefix string) (store.Store, func(), error) {
				s, err := redisstore.OpenURL(uri, &redisstore.Options{Prefix: prefix, ReplicaAcks: acks})
				if err != nil {
					return nil, nil, err
				}
				return s, func() { _ = s.Close() }, nil
			},
			Nemeses: nemeses,
		}
	}
}

// ClusterFailover crashes the primary of one shard of a Redis Cluster;
// its replica is promoted, and the crashed node comes back as a replica.
type ClusterFailover struct {
	Cluster *redistopo.Cluster
}

// Name implements Nemesis.
func (ClusterFailover) Name() string { return "cluster shard-primary failover" }

// primaries returns the addresses of the cluster's primaries, as a live
// node sees them.
func (n ClusterFailover) primaries(ctx context.Context) ([]string, error) {
	var last error
	for _, node := range n.Cluster.Nodes {
		if !node.Alive() {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: node.Addr, MaxRetries: -1})
		shards, err := c.ClusterShards(ctx).Result()
		c.Close()
		if err != nil {
			last = err
			continue
		}
		var out []string
		for _, sh := range shards {
			for _, nd := range sh.Nodes {
				if nd.Role == "master" && nd.Health == "online" && len(sh.Slots) > 0 {
					out = append(out, nd.IP+":"+strconv.FormatInt(nd.Port, 10))
				}
			}
		}
		return out, nil
	}
	return nil, errors.Join(errors.New("no cluster node answered"), last)
}

// Inject implements Nemesis.
func (n ClusterFailover) Inject(ctx context.Context, rng *rand.Rand) (func() error, error) {
	ps, err := n.primaries(ctx)
	if err != nil || len(ps) == 0 {
		return nil, fmt.Errorf("cluster primaries: %v, %w", ps, err)
	}
	old := ps[rng.IntN(len(ps))]
	node := n.Cluster.Node(old)
	if node == nil {
		return nil, fmt.Errorf("primary %s is no node of the cluster", old)
	}
	node.Kill()
	return func() error {
		ctx := context.Background()
		if err := poll(ctx, "a shard promotion", func(ctx context.Context) (bool, error) {
			ps, err := n.primaries(ctx)
			return err == nil && len(ps) == 3 && !strings.Contains(strings.Join(ps, ","), old), err
		}); err != nil {
			return err
		}
		if err := node.Restart(ctx); err != nil {
			return err
		}
		return poll(ctx, "the old primary back as a replica", func(ctx context.Context) (bool, error) { return inSync(ctx, old) })
	}, nil
}

// clusterEnv: a Redis Cluster of three primaries with a replica each.
func clusterEnv(acks int) func(t *testing.T) *Env {
	return func(t *testing.T) *Env {
		cl := redistopo.StartCluster(t, 3, 1)
		uri := "redis-cluster://" + strings.Join(cl.Addrs(), ",")
		return &Env{
			NewStore: func(ctx context.Context, prefix string) (store.Store, func(), error) {
				s, err := redisstore.OpenURL(uri, &redisstore.Options{Prefix: prefix, ReplicaAcks: acks})
				if err != nil {
					return nil, nil, err
				}
				return s, func() { _ = s.Close() }, nil
			},
			Nemeses: []Nemesis{ClusterFailover{Cluster: cl}},
		}
	}
}
