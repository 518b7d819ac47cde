package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store/redisstore"
)

// BenchmarkURLCycle measures the client side of the store on go-redis as
// a URL opens it (OpenURL with coalesce=on; idem serve opens rueidis
// unless the URL says client=go-redis): the process CPU per cycle
// (go-cpu-ns/op: the Redis server is another process, so this is the
// client's share alone, less noisy than ns/op on a shared machine) of the
// engine's acquire+complete cycle, of the bare store's, and of the naive
// SET NX + SET pattern on a go-redis client from the same URL, at 1 and 32
// goroutines. allocs/op is per cycle, scripts/op the script calls per
// cycle (two without coalescing).
func BenchmarkURLCycle(b *testing.B) {
	prefix := testenv.Prefix(b)
	s, err := redisstore.OpenURL(testenv.RedisURL()+"?coalesce=on", &redisstore.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e, err := idem.New(s, &idem.Options{LeaseDuration: naiveLock, Retention: naiveRetention})
	if err != nil {
		b.Fatal(err)
	}
	gr, err := redisstore.ParseURL(testenv.RedisURL())
	if err != nil {
		b.Fatal(err)
	}
	defer gr.Close()
	naive := func(ctx context.Context, i int64) error {
		key := prefix + "naive:" + strconv.FormatInt(i, 10)
		if err := gr.SetNX(ctx, key, "LOCKED", naiveLock).Err(); err != nil {
			return err
		}
		return gr.Set(ctx, "response:"+key, benchBody, naiveRetention).Err()
	}
	var next atomic.Int64
	next.Store(time.Now().UnixNano())
	for _, run := range []struct {
		name string
		call cycle
	}{{"engine", engineCycle(e)}, {"store", storeCycle(s)}, {"naive", naive}} {
		for _, workers := range []int{1, 32} {
			b.Run(run.name+"/c"+strconv.Itoa(workers), func(b *testing.B) {
				if err := storekit.Run(workers, workers, &next, run.call); err != nil { // connections and scripts ready
					b.Fatal(err)
				}
				b.ReportAllocs()
				st0, _ := s.CoalesceStats()
				cpu0 := testenv.ProcessCPU(b)
				b.ResetTimer()
				if err := storekit.Run(workers, b.N, &next, run.call); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				b.ReportMetric(float64(testenv.ProcessCPU(b)-cpu0)/float64(b.N), "go-cpu-ns/op")
				if st, _ := s.CoalesceStats(); run.name != "naive" {
					calls := st.Single - st0.Single + st.Batches - st0.Batches
					b.ReportMetric(float64(calls)/float64(b.N), "scripts/op")
				}
			})
		}
	}
	cleanup(b, prefix)
}
