// Package gateway is `idem serve`: a reverse proxy that puts the
// Idempotency-Key protocol of package idemhttp in front of any HTTP API,
// with an admin API, Prometheus metrics and OpenTelemetry traces.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/httpwire"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store"
)

// The codes of the gateway's own problem responses (docs/problems.md), next
// to idemhttp's.
const (
	CodeUpstreamUnreachable = "upstream_unreachable" // 502: the upstream could not be reached, nothing was sent; the key was released
	CodeUpstreamTimeout     = "upstream_timeout"     // 504: the request was sent and not answered in time; the key is UNKNOWN
	CodeLeaseLost           = idemhttp.CodeLeaseLost // 503: the lease ended before the request was sent (released) or while it ran (UNKNOWN)
	CodeKeyNotFound         = "key_not_found"        // 404 (admin API): no record for the tenant and key
	CodeAdminUnauthorized   = "admin_unauthorized"   // 401 (admin API): the bearer token is missing or wrong
	CodeKeyUnknown          = "key_unknown"          // 409 (admin API): DELETE of an UNKNOWN key without ?force=true; resolve it
	CodeDeleteInvalid       = "delete_invalid"       // 400 (admin API): DELETE with a force parameter other than true or false
	CodeDraining            = "draining"             // 503 (admin API /readyz): the gateway is shutting down
)

// FenceHeader carries the lease's fencing token to the upstream, so the
// upstream can refuse writes of a stale attempt (see store/pgstore).
const FenceHeader = "Idempotency-Fence"

// Gateway is a configured `idem serve`, ready to run.
type Gateway struct {
	cfg      Config
	engine   *idem.Engine
	registry *prometheus.Registry
	proxy    http.Handler
	admin    http.Handler
	stats    *statsRing // sampled while Run serves the admin API

	// The admin API's callers: its tokens (swapped by Reload), the hosts
	// it answers (its address as bound, once Run listens) and the audit
	// of their changes.
	access     atomic.Pointer[adminAccess]
	adminHosts atomic.Pointer[adminHosts]
	audit      *auditLog

	// The TLS of the proxy's and the admin API's listeners; nil: none.
	tls, adminTLS *tlsFiles

	// What every policy shares: the transport to the upstream (and its
	// pool), the tenant of a request and the headers it depends on.
	transport  http.RoundTripper
	tenant     func(*http.Request) (string, error)
	keyed      []string
	tel        *telemetry
	reconciles bool // the engine has a Reconcile: a reconcile URL was configured at start

	// current is the policy new requests run under; Reload swaps it.
	current atomic.Pointer[policy]
	reloads *reloadTelemetry

	// stopping ends, with cause errShutdown, the upstream calls still
	// running when the shutdown timeout ends; inflight counts the proxied
	// requests not yet finalized.
	stopping context.Context
	stop     context.CancelCauseFunc
	inflight sync.WaitGroup
	procs    *procs // nil: GOMAXPROCS is left alone (Config.AdaptProcs)
	// draining is set when the shutdown starts: /readyz answers 503 from
	// then on, before the proxy stops accepting.
	draining atomic.Bool
}

// New checks cfg and builds the gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Upstream == nil || cfg.Upstream.Scheme == "" || cfg.Upstream.Host == "" {
		return nil, errors.New("gateway: --upstream must be an absolute http(s) URL")
	}
	if cfg.Store == nil {
		return nil, errors.New("gateway: no store")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.UpstreamTimeout == 0 {
		cfg.UpstreamTimeout = 30 * time.Second
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	sources, err := cfg.hardenDefaults()
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBuildInfo(reg, ReadBuild())
	tel := newTelemetry(reg, cfg.Tracer, cmp.Or(cfg.StoreTimeout, idem.DefaultStoreTimeout), cfg.longestUpstreamTimeout())
	obs := newHoldTelemetry(reg, newUnknownTelemetry(reg, tel, cfg.Logger))
	registerNearCache(reg, cfg.Store)
	registerCoalesce(reg, cfg.Store)
	registerMemoryUsage(reg, cfg.Store)
	g := &Gateway{cfg: cfg, registry: reg, stats: newStatsRing(reg, cfg.StatsEvery), transport: cfg.Transport,
		tenant: tenantFunc(sources, cfg.AllowAnonymous), keyed: keyedHeaders(sources), tel: tel, reloads: newReloadTelemetry(reg)}
	if g.transport == nil {
		g.transport = NewUpstreamTransport()
	}
	if cfg.AdaptProcs {
		g.procs = newProcs()
	}
	opts := &idem.Options{LeaseDuration: cfg.Lease, Retention: cfg.Retention, KeyRetention: cfg.KeyRetention, Logger: cfg.Logger, Observer: obs,
		Takeover: cfg.Takeover, ReconcileTimeout: cfg.ReconcileTimeout, MaxResultBytes: max(cfg.MaxResponse, defaultMaxResult),
		StoreTimeout: cfg.StoreTimeout, ReconcileRate: cfg.ReconcileRate, ReconcileConcurrency: cfg.ReconcileConcurrency}
	if cfg.hasReconcileURL() {
		g.reconciles = true
		opts.Reconcile = reportingTo(func(ctx context.Context, rec store.Record) (idem.Resolution, error) {
			return g.current.Load().reconcile(ctx, rec)
		})
	} else if cfg.ReconcileEvery > 0 {
		return nil, errors.New("gateway: --reconcile-every needs --reconcile-url (or a route's reconcile-url)")
	}
	engine, err := idem.New(cfg.Store, opts)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.engine = engine
	obs.countUnknown(engine)
	g.registerReady(reg)
	p, err := g.compile(cfg)
	if err != nil {
		return nil, err // compile's errors say "gateway:" or name their field
	}
	g.current.Store(p)
	g.stopping, g.stop = context.WithCancelCause(context.Background())
	g.proxy = g.tracked(g.observed(g.checkTarget(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.current.Load().handler.ServeHTTP(w, r) // the policy the request runs under to its end
	}))))
	access, err := loadAdminAccess(cfg)
	if err != nil {
		return nil, err
	}
	hosts, err := newAdminHosts(cfg.Admin, cfg.AdminHosts)
	if err != nil {
		return nil, err
	}
	if g.tls, err = newTLSFiles("--tls", cfg.TLSCert, cfg.TLSKey, ""); err != nil {
		return nil, err
	}
	if g.adminTLS, err = newTLSFiles("--admin-tls", cfg.AdminTLSCert, cfg.AdminTLSKey, cfg.AdminClientCA); err != nil {
		return nil, err
	}
	registerCertExpiry(reg, map[string]*tlsFiles{"proxy": g.tls, "admin": g.adminTLS})
	g.access.Store(access)
	g.adminHosts.Store(hosts)
	g.audit = newAuditLog(reg, cfg.Logger)
	g.admin = g.adminHandler()
	return g, nil
}

// hasReconcileURL reports whether c has a reconcile URL, top-level or a route's.
func (c *Config) hasReconcileURL() bool {
	if c.ReconcileURL != "" {
		return true
	}
	for _, rt := range c.Routes {
		if rt.ReconcileURL != "" {
			return true
		}
	}
	return false
}

// onOutcome counts and logs what the middleware did with a request of
// route (Route.label): in its access-log line when it has one, else in
// logOutcome's.
func (g *Gateway) onOutcome(r *http.Request, o idemhttp.Outcome, route string) {
	g.tel.requests.WithLabelValues(o.String(), route).Inc()
	x := exchangeOf(r.Context())
	x.note(route, o.String())
	if x == nil || !x.accessLog {
		logOutcome(g.cfg.Logger, r, o)
	}
}

// rejected counts and logs a request the gateway refused before it knew
// its route.
func (g *Gateway) rejected(r *http.Request) { g.onOutcome(r, idemhttp.OutcomeRejected, "") }

// Handler returns the proxy with idempotency in front, for tests that serve
// it themselves.
func (g *Gateway) Handler() http.Handler { return g.proxy }

// AdminHandler returns the admin API.
func (g *Gateway) AdminHandler() http.Handler { return g.admin }

// Engine returns the gateway's engine.
func (g *Gateway) Engine() *idem.Engine { return g.engine }

// reverseProxy forwards the requests of route (Route.label) to p's
// upstream, over the gateway's transport, and ends a call that has not
// answered within timeout. With traces on, the call has its span, and the
// upstream gets it as its traceparent.
func (g *Gateway) reverseProxy(p *policy, timeout time.Duration, route string) http.Handler {
	// It tells a request that never left from one that may have reached
	// the upstream (idemclient.Sent), does not send one whose lease has
	// ended, and keeps net/http from resending one by itself.
	transport := &idemclient.Transport{Base: g.transport}
	upstream := p.cfg.Upstream
	cfg := p.cfg // for the error answers: the route's timeout
	cfg.UpstreamTimeout = timeout
	upstreamSeconds := g.tel.upstreamSeconds.WithLabelValues(route)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			rewriteIdempotencyHeaders(pr.In, pr.Out)
			sendInOneWrite(pr.In, pr.Out)
		},
		Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			var span trace.Span
			if g.cfg.Tracer != nil {
				var ctx context.Context
				ctx, span = g.cfg.Tracer.Start(r.Context(), "idem.upstream", trace.WithSpanKind(trace.SpanKindClient))
				defer span.End()
				r = r.WithContext(ctx)
				r.Header = r.Header.Clone() // the proxy's; a RoundTripper does not change its request
				traceContext.Inject(ctx, propagation.HeaderCarrier(r.Header))
			}
			start := time.Now()
			resp, err := transport.RoundTrip(r)
			elapsed := time.Since(start)
			upstreamSeconds.Observe(elapsed.Seconds())
			if x := exchangeOf(r.Context()); x != nil {
				x.upstream.Add(int64(elapsed))
			}
			if err != nil && span != nil {
				span.RecordError(err)
			}
			return resp, err
		}),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { g.upstreamError(w, r, err, &cfg) },
		BufferPool:   CopyBuffers{},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// One cancellable context ends the call on the timeout and on the
		// shutdown, each with its cause: a context.WithTimeoutCause on top
		// of it would be a second cancel context registered in the first.
		ctx, stop := context.WithCancelCause(r.Context())
		defer stop(nil)
		timer := time.AfterFunc(timeout, func() { stop(errUpstreamTimeout) })
		defer timer.Stop()
		defer context.AfterFunc(g.stopping, func() { stop(errShutdown) })()
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
}

var errUpstreamTimeout = errors.New("gateway: upstream timed out")

// sendInOneWrite hands the transport a body that was read into memory
// (httpwire.Body: to fingerprint it, or to find its key) as a reader
// net/http knows, with its length. The proxy wraps every body in a
// reader of its own, and net/http writes the header of a body it cannot
// see into before the body, to let a streamed one come: two writes, and
// two segments for the upstream to read, where one does (docs/benchmarks.md).
// A body the client sent chunked goes on with a Content-Length.
func sendInOneWrite(in, out *http.Request) {
	b, ok := in.Body.(*httpwire.Body)
	if !ok || out.Body == nil {
		return
	}
	out.Body = io.NopCloser(&b.Reader)
	out.ContentLength, out.TransferEncoding = int64(b.Len()), nil
}

// CopyBuffers lends a reverse proxy the buffers it copies response
// bodies with. Without a pool it allocates 32 KiB per response: at 15,000
// requests a second that is most of what the gateway allocates, and it
// drives the garbage collector, whose assists then land on requests and
// show in the tail latency (docs/benchmarks.md).
type CopyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// Get implements httputil.BufferPool.
func (CopyBuffers) Get() []byte { return copyBufferPool.Get().(*[32 << 10]byte)[:] }

// Put implements httputil.BufferPool.
func (CopyBuffers) Put(b []byte) {
	if len(b) == 32<<10 {
		copyBufferPool.Put((*[32 << 10]byte)(b))
	}
}

// NewUpstreamTransport returns the transport to the upstream: Go's default,
// with a pool sized for a proxy. The default keeps 2 idle connections per
// host, so under concurrent load every other request would dial anew.
func NewUpstreamTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	return t
}

// logOutcome writes one line per key event: at debug level for the
// high-volume, expected ones (first requests executed, replays, conflicts,
// requests without a key), at warn level for failures of the store or the
// lease, at info otherwise. An executed request at info was a line per
// request by default, which cost idem serve about a quarter of its CPU per
// request at 1 client (docs/benchmarks.md); --access-log is the line per
// request an operator chooses.
func logOutcome(log *slog.Logger, r *http.Request, o idemhttp.Outcome) {
	level := slog.LevelInfo
	switch o {
	case idemhttp.OutcomePassed, idemhttp.OutcomeExecuted, idemhttp.OutcomeReplayed, idemhttp.OutcomeConflict,
		idemhttp.OutcomeStoreFull: // idemhttp warns, once a second
		level = slog.LevelDebug
	case idemhttp.OutcomeStoreError, idemhttp.OutcomeLeaseLost, idemhttp.OutcomeFailedOpen:
		level = slog.LevelWarn
	}
	ctx := r.Context()
	if !log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path)}
	if key, err := idemhttp.KeyFromHeader(r.Header); err == nil {
		attrs = append(attrs, slog.String("key", key)) // as the store, the upstream and the admin API have it
	}
	log.LogAttrs(ctx, level, "idem: "+o.String(), attrs...)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Run serves the proxy and the admin API until ctx is done, then shuts down
// gracefully: /readyz fails, and after DrainDelay the proxy stops
// accepting, lets in-flight requests finish and finalize their keys. It
// returns nil after the drain, even one that the shutdown timeout cut (the
// cut keys are UNKNOWN, or released when nothing was sent, and the log
// says so): that is the end of a stop, not a failure. ready, if not nil,
// is called with the bound addresses once both listen.
func (g *Gateway) Run(ctx context.Context, ready func(proxy, admin net.Addr)) error {
	tcp, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		if g.cfg.AdminListener != nil {
			g.cfg.AdminListener.Close()
		}
		return fmt.Errorf("gateway: listen: %w", err)
	}
	ln := newConnLimiter(tcp, g.cfg.MaxConns)
	if g.procs != nil {
		g.procs.run()
		defer g.procs.stop()
	}
	servers := []*http.Server{g.publicServer(ln)}
	listeners := []net.Listener{g.tls.listen(ln)} // TLS over the limiter: it counts connections, handshakes included
	var adminAddr net.Addr
	if g.cfg.Admin != "" {
		aln := g.cfg.AdminListener
		if aln == nil {
			aln, err = net.Listen("tcp", g.cfg.Admin)
		}
		if err != nil {
			ln.Close()
			return fmt.Errorf("gateway: admin listen: %w", err)
		}
		adminAddr = aln.Addr()
		g.adminHosts.Store(g.adminHosts.Load().bound(adminAddr))
		srv, served := g.adminServer(aln)
		servers, listeners = append(servers, srv), append(listeners, served)
	}
	errs := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { errs <- srv.Serve(listeners[i]) }()
	}
	if adminAddr != nil {
		warnAdmin(g.cfg, adminAddr)
		defer inBackground(ctx, g.stats.run)()
	}
	adminShown := "off" // --admin '': fmt.Sprint of the nil address logged "<nil>"
	if adminAddr != nil {
		adminShown = adminAddr.String()
	}
	g.cfg.Logger.Info("idem: serving", "listen", ln.Addr().String(), "upstream", redact.URL(g.cfg.Upstream.String()), "admin", adminShown,
		"tls", g.tls != nil, "admin_tls", g.adminTLS != nil, "admin_client_ca", g.cfg.AdminClientCA != "",
		"max_conns", g.cfg.MaxConns, "read_timeout", g.cfg.ReadTimeout, "idle_timeout", g.cfg.IdleTimeout, "write_timeout", g.cfg.writeTimeout(),
		"keyless_requests", keylessRequests(g.current.Load().cfg))
	if ready != nil {
		ready(ln.Addr(), adminAddr)
	}
	if g.cfg.ReconcileEvery > 0 {
		sweepCtx, stopSweep := context.WithCancel(ctx)
		swept := make(chan struct{})
		go func() { defer close(swept); g.sweep(sweepCtx) }()
		defer func() { stopSweep(); <-swept }()
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errs:
	}
	g.draining.Store(true)
	if g.cfg.DrainDelay > 0 && serveErr == nil {
		g.cfg.Logger.Info("idem: draining: /readyz answers 503; the proxy keeps serving until the drain delay ends", "drain_delay", g.cfg.DrainDelay)
		<-time.After(g.cfg.DrainDelay) // the load balancers' time to see /readyz fail
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
	defer cancel()
	g.cfg.Logger.Info("idem: shutting down; /readyz answers 503, the proxy accepts no more connections, in-flight requests finish first")
	var shutdownErr error
	for _, srv := range servers {
		shutdownErr = errors.Join(shutdownErr, srv.Shutdown(shutdownCtx))
	}
	if shutdownErr != nil {
		g.abandonInFlight()
		// The cut requests' handlers have returned, but the server writes
		// their answers out after that: a Close now could cut an answer in
		// the middle. A second, short graceful shutdown lets them go out
		// and closes each connection once idle.
		flushCtx, cancelFlush := context.WithTimeout(context.Background(), answerFlushTimeout)
		defer cancelFlush()
		for _, srv := range servers {
			if srv.Shutdown(flushCtx) != nil {
				srv.Close()
			}
		}
	}
	g.flushHeld(shutdownCtx)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return errors.Join(serveErr, shutdownErr)
	}
	return nil
}
