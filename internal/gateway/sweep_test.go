package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
)

// logCounter is a slog.Handler that counts records by level.
type logCounter struct {
	mu    sync.Mutex
	count map[slog.Level]int
	last  slog.Record
}

func (c *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *logCounter) WithGroup(string) slog.Handler            { return c }
func (c *logCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.count == nil {
		c.count = map[slog.Level]int{}
	}
	c.count[r.Level]++
	c.last = r.Clone()
	return nil
}

func (c *logCounter) lines() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.count {
		n += v
	}
	return n
}

// failingLookup is a reconcile lookup that answers every key 500 after
// delay (or hangs until the gateway gives up, with delay < 0), counting
// its calls and the most it had in flight at once.
type failingLookup struct {
	delay    time.Duration
	calls    atomic.Int64
	inFlight atomic.Int64
	peak     atomic.Int64
}

func (l *failingLookup) RoundTrip(r *http.Request) (*http.Response, error) {
	l.calls.Add(1)
	n := l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
	}
	if l.delay < 0 {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	time.Sleep(l.delay) // the lookup's own latency, on the bubble's clock
	h := http.Header{idemhttp.HeaderKey: {r.Header.Get(idemhttp.HeaderKey)}}
	return &http.Response{StatusCode: 500, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// sweepGateway starts, in a synctest bubble, a gateway with n UNKNOWN
// keys and the lookup l, sweeping at the interval cfg.ReconcileEvery until
// the test ends, and returns the logger's counts.
func sweepGateway(t *testing.T, cfg Config, l *failingLookup, n int) *logCounter {
	logs := &logCounter{}
	cfg.ReconcileURL, cfg.Transport = "http://lookup.test/charges/{key}", l
	cfg.Logger = slog.New(logs)
	g := adminGateway(t, cfg)
	for i := range n {
		unknownKey(t, g.Engine(), store.ID{Tenant: "acme", Key: fmt.Sprintf("k%05d", i)})
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.sweep(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	return logs
}

// Issue 22, item 9: with a lookup answering 500 and 3,000 UNKNOWN keys
// the sweep made 590 lookups a second and logged a WARN line for each.
// Now its lookups are bounded by --reconcile-rate and
// --reconcile-concurrency, a failing key backs off exponentially (so the
// lookups thin out as the failures go on), and each pass logs one line.
func TestSweepBoundsLookupsAndLogs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys = 300 // the finding had 3,000; fewer keep the test quick, the bounds are the same
		l := &failingLookup{delay: 10 * time.Millisecond}
		logs := sweepGateway(t, Config{ReconcileEvery: time.Minute}, l, keys)
		time.Sleep(70 * time.Second) // the first pass starts at 60 s
		if c := l.calls.Load(); c > 10*idem.DefaultReconcileRate+1 {
			t.Errorf("%d lookups in the first 10 s of a pass; want at most %d (--reconcile-rate's default)", c, 10*idem.DefaultReconcileRate+1)
		}
		time.Sleep(10*time.Minute - 70*time.Second)
		first := l.calls.Load()
		time.Sleep(80 * time.Minute)
		before := l.calls.Load()
		time.Sleep(30 * time.Minute)
		last := l.calls.Load() - before
		t.Logf("%d lookups in the first 10 min (%.1f/s), %d in the last 30 of 2 h (%.1f/s); %d log lines; at most %d lookups at once",
			first, float64(first)/600, last, float64(last)/1800, logs.lines(), l.peak.Load())
		if perSecond := float64(first) / 600; perSecond > idem.DefaultReconcileRate || first < keys {
			t.Errorf("%.1f lookups/s in the first 10 min; want every key asked, at most --reconcile-rate's default %v a second", perSecond, idem.DefaultReconcileRate)
		}
		if p := l.peak.Load(); p > idem.DefaultReconcileConcurrency {
			t.Errorf("%d lookups at once; want at most %d", p, idem.DefaultReconcileConcurrency)
		}
		// By then each key fails every 30 min (the backoff's cap), give or take a pass.
		if last > keys*6/5 {
			t.Errorf("%d lookups of %d keys in the last 30 min; want at most about one per key (backed off)", last, keys)
		}
		if passes := int((2 * time.Hour) / time.Minute); logs.lines() > passes {
			t.Errorf("%d log lines in 2 h of passes every minute; want at most one a pass (%d)", logs.lines(), passes)
		}
	})
}

// A lookup that hangs holds one of --reconcile-concurrency's slots for
// --reconcile-timeout; the others go on.
func TestSweepHangingLookupsRunConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &failingLookup{delay: -1}
		logs := sweepGateway(t, Config{ReconcileEvery: 10 * time.Second, ReconcileTimeout: 5 * time.Second}, l, 40)
		// The first pass starts at 10 s: 40 keys, 4 at a time, 5 s each,
		// end at about 60 s, not 210 s.
		time.Sleep(59 * time.Second)
		if calls, p := l.calls.Load(), l.peak.Load(); calls != 40 || p != idem.DefaultReconcileConcurrency {
			t.Errorf("%d lookups, %d at once in the pass's first 49 s; want all 40, %d at once", calls, p, idem.DefaultReconcileConcurrency)
		}
		time.Sleep(2 * time.Second)
		if lines := logs.lines(); lines != 1 {
			t.Errorf("%d log lines once the pass ended; want 1", lines)
		}
	})
}
