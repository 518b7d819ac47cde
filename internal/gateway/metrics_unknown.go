package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// unknownTelemetry is the gateway's idem.Observer: telemetry, told also of
// every reconciliation (idem.ReconcileObserver), with the gauge of UNKNOWN
// keys.
type unknownTelemetry struct {
	*telemetry
	reg             prometheus.Registerer
	reconciliations *prometheus.CounterVec
}

func newUnknownTelemetry(reg prometheus.Registerer, tel *telemetry) *unknownTelemetry {
	t := &unknownTelemetry{telemetry: tel, reg: reg, reconciliations: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_reconciliations_total",
		Help: "Reconciliations of UNKNOWN keys by result: completed, not_executed, unknown (the verdict), error (the lookup or the store failed: still UNKNOWN).",
	}, []string{"result"})}
	reg.MustRegister(t.reconciliations)
	for _, result := range append(labelValues(idem.VerdictUnknown), "error") { // at 0, as in newTelemetry
		t.reconciliations.WithLabelValues(result)
	}
	return t
}

// Reconciled implements idem.ReconcileObserver.
func (t *unknownTelemetry) Reconciled(_ store.ID, v idem.Verdict, err error) {
	result := v.String()
	if err != nil {
		result = "error"
	}
	t.reconciliations.WithLabelValues(result).Inc()
}

// Bounds of the UNKNOWN gauges: they page through the store's index of
// UNKNOWN keys at most once per unknownCountEvery, read at most
// maxUnknownPages pages, and give up after unknownCountTimeout.
const (
	unknownCountEvery   = 15 * time.Second
	maxUnknownPages     = 100
	unknownCountTimeout = 2 * time.Second
)

// unknownCensus is the count of UNKNOWN keys and the time the oldest of
// them was marked, read from the store's index of UNKNOWN keys (no scan)
// and cached between scrapes.
type unknownCensus struct {
	engine *idem.Engine

	mu     sync.Mutex // guards the fields below
	at     time.Time  // when the census was taken; zero: never
	count  int
	oldest time.Time // when the oldest UNKNOWN key was marked; zero: there is none
}

// read returns the census, taken anew when the cached one is older than
// unknownCountEvery. When the store fails it returns the last one: the
// store's trouble shows in idem_store_seconds.
func (c *unknownCensus) read() (count int, oldest time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < unknownCountEvery {
		return c.count, c.oldest
	}
	ctx, cancel := context.WithTimeout(context.Background(), unknownCountTimeout)
	defer cancel()
	n, first, p := 0, time.Time{}, store.ListParams{AllTenants: true, Limit: store.MaxListLimit}
	for range maxUnknownPages {
		page, err := c.engine.ListUnknown(ctx, p)
		if err != nil {
			return c.count, c.oldest
		}
		n += len(page.Records)
		for _, rec := range page.Records {
			if marked := rec.CompletedAt; !marked.IsZero() && (first.IsZero() || marked.Before(first)) {
				first = marked
			}
		}
		if p.After = page.Next; p.After == "" {
			break
		}
	}
	c.at, c.count, c.oldest = time.Now(), n, first
	return n, first
}

// countUnknown registers idem_unknown_keys and idem_unknown_oldest_seconds.
func (t *unknownTelemetry) countUnknown(e *idem.Engine) {
	c := &unknownCensus{engine: e}
	t.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_unknown_keys",
		Help: "Keys in state UNKNOWN (of all tenants, counted up to 100,000, refreshed at most every 15s): work that may have taken effect with no known result, awaiting reconciliation or resolution; a lease that ended with nobody to finish it (a crashed gateway's) counts from its end.",
	}, func() float64 {
		n, _ := c.read()
		return float64(n)
	}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_unknown_oldest_seconds",
		Help: "Age of the oldest UNKNOWN key (among those idem_unknown_keys counts), since it was marked UNKNOWN; 0 when there is none. An UNKNOWN key expires at the end of its retention, after which a retry runs again: resolve it before.",
	}, func() float64 {
		_, oldest := c.read()
		if oldest.IsZero() {
			return 0
		}
		return max(0, time.Since(oldest).Seconds())
	}))
}
