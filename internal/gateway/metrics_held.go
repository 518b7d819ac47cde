package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// holdTelemetry is the gateway's idem.Observer told also of the
// finalizations the engine holds (idem.HoldObserver): the results, marks
// and releases the store did not take in time, kept in memory and retried.
type holdTelemetry struct {
	*unknownTelemetry
	events *prometheus.CounterVec
	held   prometheus.Gauge
}

func newHoldTelemetry(reg prometheus.Registerer, t *unknownTelemetry) *holdTelemetry {
	h := &holdTelemetry{unknownTelemetry: t,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_held_total",
			Help: "Finalizations the store did not take in time, by op (complete, mark_unknown, release, release_orphan) and event: held (kept in memory, retried), stored, dropped (the lease was taken over meanwhile, or the store stayed down past the lease: the key turns UNKNOWN), refused (the hold was full).",
		}, []string{"op", "event"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idem_held",
			Help: "Finalizations held in memory now, waiting for the store: results a retry to this gateway is answered from, and that a shutdown tries to store.",
		}),
	}
	reg.MustRegister(h.events, h.held)
	return h
}

// Held implements idem.HoldObserver.
func (h *holdTelemetry) Held(_ store.ID, op string, ev idem.HoldEvent) {
	h.events.WithLabelValues(op, ev.String()).Inc()
	switch ev {
	case idem.HoldStarted:
		h.held.Inc()
	case idem.HoldStored, idem.HoldDropped:
		h.held.Dec()
	}
}
