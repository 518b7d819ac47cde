package gateway

import (
	"context"
	"errors"
	"log/slog"
	"strings"
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
	contract        *contractTelemetry
}

func newUnknownTelemetry(reg prometheus.Registerer, tel *telemetry, log *slog.Logger) *unknownTelemetry {
	t := &unknownTelemetry{telemetry: tel, reg: reg, reconciliations: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_reconciliations_total",
		Help: "Reconciliations of UNKNOWN keys by result: completed, not_executed, unknown (the verdict), error (the lookup or the store failed: still UNKNOWN).",
	}, []string{"result"}), contract: newContractTelemetry(reg, log)}
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
	if ce, ok := errors.AsType[*contractError](err); ok {
		t.contract.breach(ce)
	}
}

// contractLogEvery bounds the ERROR lines of a lookup that breaks its
// contract: it breaks it for every key, and the sweep asks up to
// --reconcile-rate a second; the metric counts each.
const contractLogEvery = time.Minute

// contractTelemetry makes a lookup that breaks the contract of
// docs/reconcile.md loud (issue 36, item 7): an ERROR line that says what
// is missing and the fix, and idem_reconcile_contract_errors_total by
// what is missing, for an alert. Such a lookup settles no key; before, it
// left each one UNKNOWN with a WARN line like any other failed lookup.
type contractTelemetry struct {
	log    *slog.Logger
	errors *prometheus.CounterVec

	mu     sync.Mutex
	logged time.Time // when the last ERROR line was written
	since  int       // breaches since then, not logged
}

func newContractTelemetry(reg prometheus.Registerer, log *slog.Logger) *contractTelemetry {
	c := &contractTelemetry{log: log, errors: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_reconcile_contract_errors_total",
		Help: "Reconcile lookups whose 200 lacked an echo docs/reconcile.md requires, by what was missing: fence (Idempotency-Fence) or tenant (Idempotency-Tenant). Such a lookup settles no key: fix it.",
	}, []string{"missing"})}
	reg.MustRegister(c.errors)
	for m := range contractHeaders { // at 0, as in newTelemetry
		c.errors.WithLabelValues(m)
	}
	return c
}

func (c *contractTelemetry) breach(err *contractError) {
	for _, m := range err.Missing {
		c.errors.WithLabelValues(m).Inc()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.logged.IsZero() && time.Since(c.logged) < contractLogEvery {
		c.since++
		return
	}
	c.log.Error("idem: the reconcile lookup breaks its contract; the key stays UNKNOWN, and so will every key it is asked about until it is fixed",
		"err", err.Error(), "missing", strings.Join(err.Missing, ","), "more_since_last_line", c.since)
	c.logged, c.since = time.Now(), 0
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
		Help: "Age of the oldest UNKNOWN key (among those idem_unknown_keys counts), since it was marked UNKNOWN; 0 when there is none. An UNKNOWN key is kept until reconciled or resolved, however long: settle it.",
	}, func() float64 {
		_, oldest := c.read()
		if oldest.IsZero() {
			return 0
		}
		return max(0, time.Since(oldest).Seconds())
	}))
}
