package storekit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Call is one call a benchmark measures; i numbers it, uniquely within
// one Compare (a call that needs a new key each time makes it of i).
type Call func(ctx context.Context, i int64) error

// Baseline is a call that Compare measures another against. Name names
// its metrics: <Name>-ns/op, and the ratio Ratio (default x_<Name>).
type Baseline struct {
	Name  string
	Ratio string
	Call  Call
}

// Pace is how Compare runs calls: Workers goroutines at once, switching
// between the measured call and its baselines every Chunk calls.
type Pace struct {
	Workers, Chunk int
}

// Compare measures call against baselines in the same run, so that both
// see the same load on a shared machine: each does b.N calls, in chunks,
// the measured call's chunks interleaved with the baselines' (in turn
// before and after them, so that neither always runs first), and only the
// measured call's time counts as ns/op. For each baseline it reports
// <name>-ns/op and the ratio of the baseline's time over the call's:
// above 1 means the call is faster; 0.9 against a bare handler means the
// wrapped one keeps 90% of its throughput.
func Compare(b *testing.B, pace Pace, call Call, baselines ...Baseline) {
	var next atomic.Int64
	baseTime := make([]time.Duration, len(baselines))
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		n := min(pace.Chunk, b.N-done)
		runBaselines := func() {
			b.StopTimer()
			for i, base := range baselines {
				start := time.Now()
				if err := Run(pace.Workers, n, &next, base.Call); err != nil {
					b.Fatal(err)
				}
				baseTime[i] += time.Since(start)
			}
			b.StartTimer()
		}
		if round%2 == 0 {
			runBaselines()
		}
		if err := Run(pace.Workers, n, &next, call); err != nil {
			b.Fatal(err)
		}
		if round%2 == 1 {
			runBaselines()
		}
		done += n
	}
	b.StopTimer()
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	for i, base := range baselines {
		baseNs := float64(baseTime[i].Nanoseconds()) / float64(b.N)
		ratio := base.Ratio
		if ratio == "" {
			ratio = "x_" + base.Name
		}
		b.ReportMetric(baseNs, base.Name+"-ns/op")
		b.ReportMetric(baseNs/ns, ratio)
	}
}

// Run runs n calls of c on workers goroutines, numbered from *next on,
// and returns the first error.
func Run(workers, n int, next *atomic.Int64, c Call) error {
	ctx := context.Background()
	end := next.Load() + int64(n)
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= end {
					return
				}
				if err := c(ctx, i); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	next.Store(end) // workers overshoot the counter by one each
	if p := firstErr.Load(); p != nil {
		return *p
	}
	return nil
}
