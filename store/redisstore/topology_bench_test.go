package redisstore_test

import (
	"context"
	"crypto/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testinfra/redistopo"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// topologyWorkers is how many goroutines run cycles at once in
// BenchmarkClusterCycle, as concurrent requests of one application server.
const topologyWorkers = 16

// BenchmarkClusterCycle measures the acquire+complete cycle on a 3-primary
// Redis Cluster started for it against the single Redis server of the
// tests (127.0.0.1:6379), in the same run, with topologyWorkers concurrent
// workers, alternating the two in ten slices so that load from elsewhere
// on the machine hits both alike. It reports both throughputs and
// routing-cost-%: how much lower the cluster's throughput is (on one small
// machine the cluster cannot be faster; the number is the cost of the
// cluster client's routing). As the server on 6379 is shared with other
// tests and may be configured differently, it also splits the cost with
// servers started like the cluster's nodes: a standalone node (own-node)
// and a cluster of that one node holding every slot (one-node-cluster).
// cluster-mode-cost-% is one-node-cluster against own-node: the cluster
// client and the cluster-mode server, with no spreading; spread-cost-% is
// the 3-primary cluster against the one-node cluster: three servers
// sharing the machine's cores.
func BenchmarkClusterCycle(b *testing.B) {
	newStore := func(c redis.Scripter) *redisstore.Store {
		s, err := redisstore.New(c, &redisstore.Options{Prefix: testenv.Prefix(b)})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	single := newStore(testenv.Redis(b))
	own := newStore(redistopo.Client(b, redistopo.StartNode(b)))
	oneNode := newStore(redistopo.StartCluster(b, 1, 0).Client(b))
	cluster := newStore(redistopo.StartCluster(b, 3, 0).Client(b))
	b.Run("acquire+complete", func(b *testing.B) {
		const slices = 10
		var tSingle, tOwn, tOneNode, tCluster time.Duration
		for i := range slices {
			n := b.N/slices + boolInt(i < b.N%slices)
			tSingle += cycleTime(b, single, n)
			tOwn += cycleTime(b, own, n)
			tOneNode += cycleTime(b, oneNode, n)
			tCluster += cycleTime(b, cluster, n)
		}
		rate := func(d time.Duration) float64 { return float64(b.N) / d.Seconds() }
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(rate(tSingle), "single-cycles/s")
		b.ReportMetric(rate(tOwn), "own-node-cycles/s")
		b.ReportMetric(rate(tOneNode), "one-node-cluster-cycles/s")
		b.ReportMetric(rate(tCluster), "cluster-cycles/s")
		cost := func(slow, fast time.Duration) float64 { return (float64(slow)/float64(fast) - 1) * 100 }
		b.ReportMetric(cost(tCluster, tSingle), "routing-cost-%")
		b.ReportMetric(cost(tOneNode, tOwn), "cluster-mode-cost-%")
		b.ReportMetric(cost(tCluster, tOneNode), "spread-cost-%")
	})
}

// BenchmarkSentinelCycle measures the acquire+complete cycle through a
// Sentinel failover client on a primary with 2 replicas, with
// ReplicaAcks 0 and 1, against a standalone node started alike, in
// alternating slices as BenchmarkClusterCycle does. ack-cost-% is what
// waiting for one replica costs.
func BenchmarkSentinelCycle(b *testing.B) {
	newStore := func(c redis.Scripter, acks int) *redisstore.Store {
		s, err := redisstore.New(c, &redisstore.Options{Prefix: testenv.Prefix(b), ReplicaAcks: acks})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	own := newStore(redistopo.Client(b, redistopo.StartNode(b)), 0)
	topo := redistopo.StartSentinel(b, 2, 3)
	client := topo.Client(b)
	plain, acked := newStore(client, 0), newStore(client, 1)
	b.Run("acquire+complete", func(b *testing.B) {
		const slices = 10
		var tOwn, tPlain, tAcked time.Duration
		for i := range slices {
			n := b.N/slices + boolInt(i < b.N%slices)
			tOwn += cycleTime(b, own, n)
			tPlain += cycleTime(b, plain, n)
			tAcked += cycleTime(b, acked, n)
		}
		rate := func(d time.Duration) float64 { return float64(b.N) / d.Seconds() }
		cost := func(slow, fast time.Duration) float64 { return (float64(slow)/float64(fast) - 1) * 100 }
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(rate(tOwn), "own-node-cycles/s")
		b.ReportMetric(rate(tPlain), "sentinel-cycles/s")
		b.ReportMetric(rate(tAcked), "sentinel-acks1-cycles/s")
		b.ReportMetric(cost(tPlain, tOwn), "replicated-cost-%")
		b.ReportMetric(cost(tAcked, tPlain), "ack-cost-%")
	})
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// cycleTime runs n acquire+complete cycles on fresh keys over topologyWorkers
// goroutines and returns how long they took.
func cycleTime(b *testing.B, s store.Store, n int) time.Duration {
	ctx := context.Background()
	base := rand.Text()[:8]
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range topologyWorkers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				id := store.ID{Tenant: "bench", Key: base + strconv.FormatInt(i, 10)}
				res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", Fingerprint: "fp", LeaseDuration: time.Minute})
				if err != nil || !res.Acquired {
					b.Errorf("acquire: %+v, %v", res, err)
					return
				}
				err = s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: id, Owner: "o", Fence: res.Record.Fence},
					Result: store.Result{Status: 200, Body: []byte(`{"ok":true}`)}, Retention: time.Minute})
				if err != nil {
					b.Errorf("complete: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}
