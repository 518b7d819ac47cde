package gateway

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// telemetry turns the engine's and the middleware's events into Prometheus
// metrics and OpenTelemetry spans.
type telemetry struct {
	tracer          trace.Tracer           // nil: no spans
	requests        *prometheus.CounterVec // by outcome and route
	leaseEvents     *prometheus.CounterVec
	storeSeconds    *prometheus.HistogramVec
	upstreamSeconds *prometheus.HistogramVec // by route
}

// newTelemetry registers the metrics. The latency histograms' buckets
// reach past the longest call there can be, storeTimeout and
// upstreamTimeout: the calls that ran into a timeout are the ones an
// operator looks for, and they would all be lost in +Inf.
func newTelemetry(reg prometheus.Registerer, tracer trace.Tracer, storeTimeout, upstreamTimeout time.Duration) *telemetry {
	t := &telemetry{
		tracer: tracer,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_requests_total",
			Help: "Requests by what idem did with them (executed, replayed, conflict, mismatch, rejected, store_error, pass_through, ...) and route (the config file's route name, else its match; \"\" for the requests no route matches).",
		}, []string{"outcome", "route"}),
		leaseEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_lease_events_total",
			Help: "Lease renewals, lost leases and leases that expired before renewal.",
		}, []string{"event"}),
		storeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idem_store_seconds",
			Help:    "Latency of store calls by operation and result.",
			Buckets: bucketsPast([]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}, storeTimeout),
		}, []string{"op", "result"}),
		upstreamSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idem_upstream_seconds",
			Help:    "Latency of upstream calls, until the response headers, by route (as idem_requests_total's).",
			Buckets: bucketsPast(prometheus.DefBuckets, upstreamTimeout),
		}, []string{"route"}),
	}
	reg.MustRegister(t.requests, t.leaseEvents, t.storeSeconds, t.upstreamSeconds)
	// Every known label value starts at 0: a counter that appears only at
	// its first increment has no earlier sample, so rate() and increase()
	// miss that increment and an alert on the first store error or lost
	// lease would stay silent.
	t.route("", false)
	for _, ev := range labelValues(idem.LeaseRenewed) {
		t.leaseEvents.WithLabelValues(ev)
	}
	return t
}

// bucketsPast returns base and, after it, the buckets of the 1, 2.5, 5,
// 10 ladder up to the first above limit.
func bucketsPast(base []float64, limit time.Duration) []float64 {
	b := slices.Clone(base)
	for last := b[len(b)-1]; last <= limit.Seconds(); last = b[len(b)-1] {
		next := last * 2
		if p := math.Log10(last); p == math.Round(p) { // a power of ten
			next = last * 2.5
		}
		b = append(b, next)
	}
	return b
}

// labelValues returns the names of the values of an enumeration from
// first on, up to the first value that has no name of its own (its String
// is the fallback "Type(n)").
func labelValues[T interface {
	~uint8
	String() string
}](first T) []string {
	var names []string
	for v := first; !strings.HasSuffix(v.String(), ")"); v++ {
		names = append(names, v.String())
	}
	return names
}

// StoreCall implements idem.Observer: a histogram sample and a span that
// covers the call, under the request's span.
func (t *telemetry) StoreCall(ctx context.Context, op string, elapsed time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	t.storeSeconds.WithLabelValues(op, result).Observe(elapsed.Seconds())
	timeStoreCall(ctx, op, elapsed)
	if t.tracer == nil {
		return
	}
	end := time.Now()
	_, span := t.tracer.Start(ctx, "idem."+op, trace.WithTimestamp(end.Add(-elapsed)), trace.WithSpanKind(trace.SpanKindClient))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// LeaseEvent implements idem.Observer.
func (t *telemetry) LeaseEvent(_ store.ID, ev idem.LeaseEvent) {
	t.leaseEvents.WithLabelValues(ev.String()).Inc()
}

// route starts the series of a route (named by Route.label) at
// 0: its upstream calls, and the outcomes its requests can have: those of
// the middleware, or pass_through.
func (t *telemetry) route(label string, passThrough bool) {
	t.upstreamSeconds.WithLabelValues(label)
	if passThrough {
		t.requests.WithLabelValues(outcomePassThrough, label)
		return
	}
	for _, o := range labelValues(idemhttp.OutcomePassed) {
		t.requests.WithLabelValues(o, label)
	}
}

// outcomePassThrough counts the requests of a pass-through route, which
// no middleware sees: forwarded without idempotency by configuration
// (outcome "passed" is a protected route's request without a key or of
// another method).
const outcomePassThrough = "pass_through"

// passedThrough counts the requests of a pass-through route.
func (t *telemetry) passedThrough(next http.Handler, route string) http.Handler {
	count := t.requests.WithLabelValues(outcomePassThrough, route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		count.Inc()
		exchangeOf(r.Context()).note(route, outcomePassThrough)
		next.ServeHTTP(w, r)
	})
}

// nearCacheStore is a store that may serve replays from process memory
// (redisstore with ?near_cache=on).
type nearCacheStore interface {
	NearCacheStats() (redisstore.NearCacheStats, bool)
}

// registerNearCache registers idem_near_cache_total{event} when s has its
// near cache on.
func registerNearCache(reg prometheus.Registerer, s store.Store) {
	n, ok := s.(nearCacheStore)
	if !ok {
		return
	}
	if _, on := n.NearCacheStats(); !on {
		return
	}
	events := map[string]func(redisstore.NearCacheStats) uint64{
		"hit":          func(st redisstore.NearCacheStats) uint64 { return st.Hits },
		"miss":         func(st redisstore.NearCacheStats) uint64 { return st.Misses },
		"stale":        func(st redisstore.NearCacheStats) uint64 { return st.Stale },
		"invalidation": func(st redisstore.NearCacheStats) uint64 { return st.Invalidations },
	}
	for event, count := range events {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "idem_near_cache_total",
			Help:        "Near cache of completed records: hit (a replay with no Redis round trip), miss (a cached read that went to Redis), stale (a cached read that found another record: the script ran), invalidation (keys Redis told the cache to drop).",
			ConstLabels: prometheus.Labels{"event": event},
		}, func() float64 {
			st, _ := n.NearCacheStats()
			return float64(count(st))
		}))
	}
}

// coalescingStore is a store that may send operations in batches
// (redisstore with ?coalesce=on).
type coalescingStore interface {
	CoalesceStats() (redisstore.CoalesceStats, bool)
}

// registerCoalesce registers idem_coalesce_operations_total{sent},
// idem_coalesce_batches_total and idem_coalesce_largest_batch when s
// coalesces its scripts.
func registerCoalesce(reg prometheus.Registerer, s store.Store) {
	c, ok := s.(coalescingStore)
	if !ok {
		return
	}
	if _, on := c.CoalesceStats(); !on {
		return
	}
	stat := func(f func(redisstore.CoalesceStats) uint64) func() float64 {
		return func() float64 {
			st, _ := c.CoalesceStats()
			return float64(f(st))
		}
	}
	const opsHelp = "Redis store operations by how they were sent: alone (by their own script: nothing else was waiting) or batched (carried by a batch script with others)."
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idem_coalesce_operations_total", Help: opsHelp,
			ConstLabels: prometheus.Labels{"sent": "alone"}}, stat(func(st redisstore.CoalesceStats) uint64 { return st.Single })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idem_coalesce_operations_total", Help: opsHelp,
			ConstLabels: prometheus.Labels{"sent": "batched"}}, stat(func(st redisstore.CoalesceStats) uint64 { return st.Carried })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idem_coalesce_batches_total",
			Help: "Batch script calls of the Redis store, each carrying two or more operations."},
			stat(func(st redisstore.CoalesceStats) uint64 { return st.Batches })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idem_coalesce_largest_batch",
			Help: "The most operations one batch script call of the Redis store carried."},
			stat(func(st redisstore.CoalesceStats) uint64 { return st.Largest })),
	)
}

// memoryUsage is a store bounded in memory (memstore).
type memoryUsage interface {
	Usage() (used, limit int64)
}

// registerMemoryUsage registers idem_memory_store_bytes and
// idem_memory_store_limit_bytes when s is bounded in memory, so an alert
// can fire before new keys get 503 store_full.
func registerMemoryUsage(reg prometheus.Registerer, s store.Store) {
	m, ok := s.(memoryUsage)
	if !ok {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idem_memory_store_bytes",
			Help: "Bytes the memory store's live records take, as --memory-limit counts them; at the limit, new keys get 503 store_full."},
			func() float64 { used, _ := m.Usage(); return float64(used) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idem_memory_store_limit_bytes",
			Help: "The memory store's bound, --memory-limit."},
			func() float64 { _, limit := m.Usage(); return float64(limit) }),
	)
}
