package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// redisCPU returns the CPU time the Redis server has used, in seconds.
func redisCPU(b *testing.B) float64 {
	info, err := testenv.Redis(b).Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for line := range strings.SplitSeq(info, "\r\n") {
		name, value, _ := strings.Cut(line, ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %q: %v", line, err)
			}
			sum += v
		}
	}
	return sum
}

// BenchmarkCycleCPU explains BenchmarkCycle: it runs the naive pattern and
// the bare store cycle alone (not interleaved) and reports the CPU each
// costs per cycle in the Redis server (redis-cpu-ns/op, from INFO cpu) and
// in this process (go-cpu-ns/op). On a machine where client and server
// share the cores, the cycle with less CPU in total wins. INFO cpu counts
// every client of the server: run it against a private one
// (IDEM_TEST_REDIS_URL) for figures that mean something.
func BenchmarkCycleCPU(b *testing.B) {
	for _, c := range benchClients(b) {
		prefix := testenv.Prefix(b)
		s, err := c.store(prefix)
		if err != nil {
			b.Fatal(err)
		}
		for _, run := range []storekit.Baseline{{Name: "naive", Call: c.naive(prefix + "naive:")}, {Name: "store", Call: storeCycle(s)}} {
			b.Run(c.name+"/"+run.Name, func(b *testing.B) {
				var next atomic.Int64
				next.Store(time.Now().UnixNano()) // keys unique across the repeated calls of this function
				redis0, self0 := redisCPU(b), testenv.ProcessCPU(b)
				b.ResetTimer()
				if err := storekit.Run(benchWorkers, b.N, &next, run.Call); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				b.ReportMetric((redisCPU(b)-redis0)*1e9/float64(b.N), "redis-cpu-ns/op")
				b.ReportMetric(float64(testenv.ProcessCPU(b)-self0)/float64(b.N), "go-cpu-ns/op")
			})
		}
		cleanup(b, prefix)
	}
}

// BenchmarkCycleCPUCold is BenchmarkCycleCPU at the pace of one client of
// a gateway: one cycle at a time, and between cycles this process walks
// 8 MiB, as the gateway, the upstream and the load generator do between
// a lone client's Redis calls, so that each call finds the server's
// caches cold. It reports the Redis CPU per cycle of the naive pattern,
// of the least two scripts can do (pair) and of the store's scripts, and
// each as a ratio to naive (x_naive): what a lone request pays in Redis
// time for running its two steps as scripts, and for the record they keep.
func BenchmarkCycleCPUCold(b *testing.B) {
	walk := make([]byte, 8<<20)
	cold := func(c cycle) cycle {
		return func(ctx context.Context, i int64) error {
			for j := 0; j < len(walk); j += 64 {
				walk[j]++
			}
			return c(ctx, i)
		}
	}
	for _, c := range benchClients(b) {
		prefix := testenv.Prefix(b)
		s, err := c.store(prefix)
		if err != nil {
			b.Fatal(err)
		}
		var naive float64 // Redis CPU per naive cycle, in ns; the first run
		for _, run := range []storekit.Baseline{{Name: "naive", Call: c.naive(prefix + "naive:")}, {Name: "pair", Call: c.pair(prefix + "pair:")},
			{Name: "store", Call: storeCycle(s)}} {
			b.Run(c.name+"/"+run.Name, func(b *testing.B) {
				var next atomic.Int64
				next.Store(time.Now().UnixNano())
				redis0 := redisCPU(b)
				b.ResetTimer()
				if err := storekit.Run(1, b.N, &next, cold(run.Call)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				ns := (redisCPU(b) - redis0) * 1e9 / float64(b.N)
				if run.Name == "naive" {
					naive = ns
				}
				b.ReportMetric(ns, "redis-cpu-ns/op")
				b.ReportMetric(ns/naive, "x_naive")
			})
		}
		cleanup(b, prefix)
	}
}
