package memstore_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

var (
	benchBody   = []byte(`{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","object":"charge","amount":1099,"currency":"usd","status":"succeeded"}`)
	benchHeader = http.Header{"Content-Type": {"application/json"}}
)

// benchWorkers is the number of goroutines that run cycles at once, as in
// the Redis store's BenchmarkCycle.
const benchWorkers = 64

// runCycles runs b.N cycles on benchWorkers goroutines with unique keys.
func runCycles(b *testing.B, cycle func(ctx context.Context, i int64) error) {
	b.ReportAllocs()
	b.SetParallelism((benchWorkers + 1) / 2) // RunParallel starts GOMAXPROCS times this many goroutines
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := cycle(ctx, next.Add(1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCycle measures acquire+complete on the in-memory store through
// the engine (Begin, then Lease.Complete: the heartbeat goroutine, its
// timers and the lease's context included) and on the bare store, so the
// engine's own cost is the difference. x_store is the bare store's ns/op
// over the engine's, measured in the same run.
func BenchmarkCycle(b *testing.B) {
	newStore := func(b *testing.B) *memstore.Store {
		s, err := memstore.New(&memstore.Options{MaxBytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	storeCycle := func(s *memstore.Store) func(ctx context.Context, i int64) error {
		return func(ctx context.Context, i int64) error {
			id := idem.ID{Tenant: "bench", Key: strconv.FormatInt(i, 10)}
			res, err := s.Acquire(ctx, idem.AcquireParams{ID: id, Owner: "owner", Fingerprint: "fp", Lease: 30 * time.Second})
			if err != nil || !res.Acquired {
				return fmt.Errorf("acquire %d: %v, %v", i, res.Acquired, err)
			}
			return s.Complete(ctx, idem.CompleteParams{LeaseRef: idem.LeaseRef{ID: id, Owner: "owner", Fence: res.Record.Fence},
				Result: idem.Result{Status: http.StatusCreated, Header: benchHeader, Body: benchBody}, Retention: 24 * time.Hour})
		}
	}
	var storeNs float64
	b.Run("store", func(b *testing.B) {
		runCycles(b, storeCycle(newStore(b)))
		storeNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("engine", func(b *testing.B) {
		e, err := idem.New(newStore(b), &idem.Options{Lease: 30 * time.Second, Retention: 24 * time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		runCycles(b, func(ctx context.Context, i int64) error {
			att, err := e.Begin(ctx, idem.Request{Tenant: "bench", Key: strconv.FormatInt(i, 10), Fingerprint: "fp"})
			if err != nil || att.Outcome != idem.Acquired {
				return fmt.Errorf("begin %d: %v, %v", i, att.Outcome, err)
			}
			return att.Lease.Complete(ctx, idem.Result{Status: http.StatusCreated, Header: benchHeader, Body: benchBody})
		})
		if storeNs > 0 {
			b.ReportMetric(storeNs/(float64(b.Elapsed().Nanoseconds())/float64(b.N)), "x_store")
		}
	})
}
