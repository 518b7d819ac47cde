package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/prometheus/client_golang/prometheus"
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
	return t
}

// Reconciled implements idem.ReconcileObserver.
func (t *unknownTelemetry) Reconciled(_ idem.ID, v idem.Verdict, err error) {
	result := v.String()
	if err != nil {
		result = "error"
	}
	t.reconciliations.WithLabelValues(result).Inc()
}

// Bounds of the UNKNOWN gauge: it pages through the store's index of
// UNKNOWN keys at most once per unknownCountEvery, reads at most
// maxUnknownPages pages, and gives up after unknownCountTimeout.
const (
	unknownCountEvery   = 15 * time.Second
	maxUnknownPages     = 100
	unknownCountTimeout = 2 * time.Second
)

// countUnknown registers idem_unknown_keys, counted from the store's
// index of UNKNOWN keys (no scan), cached between scrapes.
func (t *unknownTelemetry) countUnknown(e *idem.Engine) {
	var (
		mu    sync.Mutex
		at    time.Time
		count float64
	)
	t.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_unknown_keys",
		Help: "Keys in state UNKNOWN (of all tenants, counted up to 100,000, refreshed at most every 15s): work that may have taken effect with no known result, awaiting reconciliation or resolution.",
	}, func() float64 {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < unknownCountEvery {
			return count
		}
		ctx, cancel := context.WithTimeout(context.Background(), unknownCountTimeout)
		defer cancel()
		n, p := 0, idem.ListParams{AllTenants: true, Limit: idem.MaxListLimit}
		for range maxUnknownPages {
			page, err := e.ListUnknown(ctx, p)
			if err != nil {
				return count // the last known count; the store's trouble shows in idem_store_seconds
			}
			n += len(page.Records)
			if p.After = page.Next; p.After == "" {
				break
			}
		}
		at, count = time.Now(), float64(n)
		return count
	}))
}
