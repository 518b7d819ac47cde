package memstore_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

var (
	benchBody   = []byte(`{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","object":"charge","amount":1099,"currency":"usd","status":"succeeded"}`)
	benchHeader = http.Header{"Content-Type": {"application/json"}}
)

// benchWorkers is the number of goroutines that run cycles at once, as in
// the Redis store's BenchmarkCycle.
const benchWorkers = 64

// cycle is one acquire+complete of key i.
type cycle func(ctx context.Context, i int64) error

// runParallel runs n cycles on benchWorkers goroutines with unique keys
// numbered from *next on.
func runParallel(n int, next *atomic.Int64, c cycle) error {
	ctx := context.Background()
	end := next.Load() + int64(n)
	errs := make(chan error, benchWorkers)
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < end; i = next.Add(1) - 1 {
				if err := c(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	next.Store(end)
	close(errs)
	return <-errs
}

// benchChunk is how many cycles run before the benchmark switches between
// the measured cycle and its baseline, as in the Redis store's BenchmarkCycle.
const benchChunk = 2048

// measure runs b.N cycles of c, and when baseline is not nil as many of
// baseline, interleaved in chunks with the timer (and the allocation
// count) stopped; it reports the ratio x_store (baseline ns/op over c's).
func measure(b *testing.B, c, baseline cycle) {
	b.ReportAllocs()
	var next atomic.Int64
	var baseTime time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(benchChunk, b.N-done)
		if baseline != nil {
			b.StopTimer()
			start := time.Now()
			if err := runParallel(n, &next, baseline); err != nil {
				b.Fatal(err)
			}
			baseTime += time.Since(start)
			b.StartTimer()
		}
		if err := runParallel(n, &next, c); err != nil {
			b.Fatal(err)
		}
		done += n
	}
	b.StopTimer()
	if baseline != nil {
		b.ReportMetric(float64(baseTime.Nanoseconds())/float64(b.N), "store-ns/op")
		b.ReportMetric(float64(baseTime.Nanoseconds())/float64(b.Elapsed().Nanoseconds()), "x_store")
	}
}

// BenchmarkCycle measures acquire+complete on the in-memory store through
// the engine (Begin, then Lease.Complete: the heartbeat goroutine, its
// timers and the lease's context included) and on the bare store, so the
// engine's own cost is the difference. The engine's run interleaves the
// bare store's and reports x_store: the bare store's ns/op over the
// engine's, measured in the same run.
func BenchmarkCycle(b *testing.B) {
	newStore := func(b *testing.B) *memstore.Store {
		s, err := memstore.New(&memstore.Options{MaxBytes: 1 << 30, TenantShare: 1}) // one tenant's b.N records
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	storeCycle := func(s *memstore.Store) cycle {
		return func(ctx context.Context, i int64) error {
			id := store.ID{Tenant: "bench", Key: strconv.FormatInt(i, 10)}
			res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "owner", Fingerprint: "fp", LeaseDuration: 30 * time.Second, Retention: 24 * time.Hour})
			if err != nil || !res.Acquired {
				return fmt.Errorf("acquire %d: %v, %v", i, res.Acquired, err)
			}
			return s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: id, Owner: "owner", Fence: res.Record.Fence},
				Result: store.Result{Status: http.StatusCreated, Header: benchHeader, Body: benchBody}, Retention: 24 * time.Hour})
		}
	}
	b.Run("store", func(b *testing.B) {
		measure(b, storeCycle(newStore(b)), nil)
	})
	b.Run("engine", func(b *testing.B) {
		e, err := idem.New(newStore(b), &idem.Options{LeaseDuration: 30 * time.Second, Retention: 24 * time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		engineCycle := func(ctx context.Context, i int64) error {
			att, err := e.Begin(ctx, idem.Request{Tenant: "bench", Key: strconv.FormatInt(i, 10), Fingerprint: "fp"})
			if err != nil || att.Outcome != idem.Acquired {
				return fmt.Errorf("begin %d: %v, %v", i, att.Outcome, err)
			}
			return att.Lease.Complete(ctx, store.Result{Status: http.StatusCreated, Header: benchHeader, Body: benchBody})
		}
		measure(b, engineCycle, storeCycle(newStore(b)))
	})
}
