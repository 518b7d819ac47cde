package gateway

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// reloadTelemetry counts reloads by result and keeps when the running
// configuration was loaded, as Prometheus's own config reload metrics do.
type reloadTelemetry struct {
	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
	successful  prometheus.Gauge
}

func newReloadTelemetry(reg prometheus.Registerer) *reloadTelemetry {
	t := &reloadTelemetry{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_config_reloads_total",
			Help: "Reloads of the configuration (SIGHUP) by result: success, or failure (the running configuration stays).",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idem_config_last_reload_success_timestamp_seconds",
			Help: "When the running configuration was loaded (at start, or by the last successful reload), in Unix seconds.",
		}),
		successful: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idem_config_last_reload_successful",
			Help: "1 when the last reload (or the start) succeeded, 0 when it failed and an older configuration runs.",
		}),
	}
	reg.MustRegister(t.reloads, t.lastSuccess, t.successful)
	t.reloads.WithLabelValues("success")
	t.reloads.WithLabelValues("failure")
	t.lastSuccess.SetToCurrentTime()
	t.successful.Set(1)
	return t
}

// Reload compiles the configuration load returns and swaps it in
// atomically: requests that come in afterwards run under it, and those in
// flight finish under the one they started with. On any error, load's or
// the compilation's, the running configuration stays; the error is logged
// and returned.
//
// Reload takes from the configuration only what a reload may change: the
// upstream and its timeout, the lease, retention, methods, require-key,
// max-body, wait, fail-open, repeatability, key retention, mismatch status and replay headers, the access log, the effective configuration /v1/config serves, the
// reconcile URLs and token, and the routes. The rest (the listeners and
// their limits, the store, the engine's settings, the tenant's sources,
// the error format, the admin API) is the running gateway's own: a caller
// refuses a change to it (cmd/idem does) rather than pass it here. The
// admin tokens are read again from the running --admin-tokens-file, and
// the certificates, keys and client CAs from the running TLS files.
func (g *Gateway) Reload(load func() (Config, error)) error {
	err := g.reload(load)
	g.CountReload(err)
	if err != nil {
		g.cfg.Logger.Error("idem: reload failed; the running configuration stays", "err", err.Error())
		return err
	}
	g.cfg.Logger.Info("idem: configuration reloaded; requests in flight finish under the one they started with",
		"routes", len(g.current.Load().cfg.Routes), "admin_tokens", len(g.access.Load().tokens))
	return nil
}

// CountReload counts a reload's result in the metrics as Reload does: a
// success (err nil) or a failure, which sets
// idem_config_last_reload_successful to 0. It is for a reload its caller
// applied, or refused, itself: cmd/idem's reload requested before the
// gateway was built, applied to the Config given to New.
func (g *Gateway) CountReload(err error) {
	if err != nil {
		g.reloads.reloads.WithLabelValues("failure").Inc()
		g.reloads.successful.Set(0)
		return
	}
	g.reloads.reloads.WithLabelValues("success").Inc()
	g.reloads.lastSuccess.SetToCurrentTime()
	g.reloads.successful.Set(1)
}

func (g *Gateway) reload(load func() (Config, error)) error {
	next, err := load()
	if err != nil {
		return err
	}
	if g.cfg.KeyRetention > 0 && next.KeyRetention == 0 {
		// The engine keeps the start's key retention for a request that
		// says none (zero): a reload to 0 would be logged as applied
		// while every new key still got the old one.
		return fmt.Errorf("gateway: --key-retention: a reload cannot turn key retention off (started with %v, which the engine applies to every key that gives none): restart idem to turn it off",
			g.cfg.KeyRetention)
	}
	p, err := g.compile(g.cfg.withReloadable(next))
	if err != nil {
		return err // compile's errors say "gateway:" or name their field
	}
	access, err := loadAdminAccess(g.cfg)
	if err != nil {
		return err
	}
	var certs, adminCerts *tlsMaterial
	if g.tls != nil {
		if certs, err = g.tls.read(); err != nil {
			return err
		}
	}
	if g.adminTLS != nil {
		if adminCerts, err = g.adminTLS.read(); err != nil {
			return err
		}
	}
	g.current.Store(p)
	g.access.Store(access)
	if certs != nil {
		g.tls.current.Store(certs) // for the handshakes from now on; open connections keep theirs
	}
	if adminCerts != nil {
		g.adminTLS.current.Store(adminCerts)
	}
	return nil
}

// withReloadable returns c, the configuration the gateway started with,
// with the settings a reload may change taken from next.
func (c Config) withReloadable(next Config) Config {
	c.Upstream, c.UpstreamTimeout = next.Upstream, next.UpstreamTimeout
	c.Lease, c.Retention, c.Methods, c.RequireKey = next.Lease, next.Retention, next.Methods, next.RequireKey
	c.MaxBody, c.Wait, c.FailOpen, c.Repeatability = next.MaxBody, next.Wait, next.FailOpen, next.Repeatability
	c.KeyRetention, c.AccessLog, c.EffectiveConfig = next.KeyRetention, next.AccessLog, next.EffectiveConfig
	c.MismatchStatus, c.ReplayHeaders = next.MismatchStatus, next.ReplayHeaders
	c.ReconcileURL, c.ReconcileToken = next.ReconcileURL, next.ReconcileToken
	c.Routes = next.Routes
	return c
}
