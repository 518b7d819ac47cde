package idemhttp

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// routeSamples is how many recent executions of a route the Retry-After
// estimate looks at, and maxRoutes how many routes it keeps: a path that
// holds identifiers makes a route per identifier, and the memory they
// take must stay bounded.
const (
	routeSamples = 32
	maxRoutes    = 1024
)

// routeTimes keeps how long the last executions of each route (method and
// path) took, so that a 409 can say when the request in flight will
// probably be done instead of when its lease ends.
type routeTimes struct {
	mu     sync.Mutex
	routes map[route]*durationRing // guarded by mu
}

// route is a method and a path: a struct, so that naming a request's
// route allocates nothing.
type route struct{ method, path string }

// durationRing holds the last routeSamples durations of one route.
type durationRing struct {
	d [routeSamples]time.Duration
	n int // durations added in all
}

func newRouteTimes() *routeTimes { return &routeTimes{routes: make(map[route]*durationRing)} }

func routeOf(r *http.Request) route { return route{r.Method, r.URL.Path} }

// add records that an execution of rt took d.
func (t *routeTimes) add(rt route, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ring, ok := t.routes[rt]
	if !ok {
		if len(t.routes) >= maxRoutes {
			for r := range t.routes { // drop any one: the map stays bounded
				delete(t.routes, r)
				break
			}
		}
		ring = new(durationRing)
		t.routes[rt] = ring
	}
	ring.d[ring.n%routeSamples] = d
	ring.n++
}

// p90 returns the 90th percentile of the recent durations of rt, false
// when it has none.
func (t *routeTimes) p90(rt route) (time.Duration, bool) {
	t.mu.Lock()
	ring, ok := t.routes[rt]
	var d []time.Duration
	if ok {
		d = slices.Clone(ring.d[:min(ring.n, routeSamples)])
	}
	t.mu.Unlock()
	if len(d) == 0 {
		return 0, false
	}
	slices.Sort(d)
	return d[(len(d)*9+9)/10-1], true
}

// inFlightRetryAfter is the Retry-After of a 409 for a key in flight: the
// time the request in flight probably still needs, by the 90th percentile
// of the route's recent executions less the time it has run (by the
// store's AcquiredAt), bounded to [1s, the rest of its lease]. Without
// executions to go by it is the rest of the lease.
func (m *middleware) inFlightRetryAfter(r *http.Request, att idem.Attempt) time.Duration {
	left := att.RetryAfter
	est, ok := m.durations.p90(routeOf(r))
	if !ok {
		return left
	}
	if at := att.Record.AcquiredAt; !at.IsZero() {
		if ran := time.Since(at); ran > 0 {
			est -= ran
		}
	}
	return min(max(est, time.Second), left)
}
