package gateway

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// readyKey is the key the readiness check looks up: a round trip to the store.
var readyKey = store.ID{Tenant: "idem", Key: "readyz"}

// errDraining is what ready answers once a shutdown has begun.
var errDraining = errors.New("the gateway is shutting down")

// ready is the readiness check of /readyz and idem_ready: not draining
// (a load balancer stops sending before the proxy stops accepting), and
// the store answers (the key's absence is an answer), within the engine's
// store timeout.
func (g *Gateway) ready(ctx context.Context) error {
	if g.draining.Load() {
		return errDraining
	}
	if _, err := g.engine.Get(ctx, readyKey); err != nil && !errors.Is(err, idem.ErrNotFound) {
		return err
	}
	return nil
}

// registerReady registers idem_ready, the readiness check read at each
// scrape: an alert on it sees what a load balancer polling /readyz sees,
// also where nothing polls it. Each scrape costs one store read, counted
// in idem_store_seconds{op="get"} like every other.
func (g *Gateway) registerReady(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "idem_ready",
		Help: "1 when the gateway is ready (what /readyz answers: the store answers a read), 0 when not.",
	}, func() float64 {
		if g.ready(context.Background()) != nil {
			return 0
		}
		return 1
	}))
}
