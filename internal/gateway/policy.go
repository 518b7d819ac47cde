package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/httpwire"
	"github.com/idemkit/idem/store"
)

// policy is one compiled configuration: the handler of every proxied
// request, and the reconcile lookups. It is immutable once built: a
// reload compiles a new one and swaps it in, and a request runs to its
// end under the one it loaded when it came in.
type policy struct {
	cfg     Config
	handler http.Handler
	// reconcilers are the lookups, by the route name a key's fingerprint
	// carries ("": the top-level --reconcile-url's).
	reconcilers map[string]*reconciler
}

// compile builds the policy of cfg's reloadable settings on the
// gateway's engine, store and listeners.
func (g *Gateway) compile(cfg Config) (*policy, error) {
	if cfg.Upstream == nil || cfg.Upstream.Scheme == "" || cfg.Upstream.Host == "" {
		return nil, errors.New("gateway: --upstream must be an absolute http(s) URL")
	}
	p := &policy{cfg: cfg, reconcilers: map[string]*reconciler{}}
	if cfg.ReplayHeaders == nil {
		p.cfg.ReplayHeaders = DefaultReplayHeaders
	}
	switch {
	case cfg.UpstreamTimeout < 0:
		return nil, fmt.Errorf("gateway: --upstream-timeout %v: want a positive duration", cfg.UpstreamTimeout)
	case cfg.UpstreamTimeout == 0:
		p.cfg.UpstreamTimeout = 30 * time.Second
	}
	p.cfg.Methods = upperMethods(cfg.Methods)
	if lease := cmp.Or(p.cfg.Lease, defaultLease); lease < p.cfg.UpstreamTimeout {
		// With --takeover run, the retry after the lease would send the
		// request again while the upstream may still be running it: a
		// start refused. Otherwise the retry finds the key UNKNOWN (or
		// asks the lookup): flags that running deployments set, so a
		// warning, where a route that says so is refused (checkLease).
		if cfg.Takeover == idem.TakeoverRun {
			return nil, fmt.Errorf("gateway: --upstream-timeout %v is longer than --lease %v: with --takeover run a key whose gateway died mid-request would be sent again while the upstream may still be running it; make --lease at least --upstream-timeout",
				p.cfg.UpstreamTimeout, lease)
		}
		g.cfg.Logger.Warn("idem: --upstream-timeout is longer than --lease: a key whose gateway died mid-request could be taken over (reconciled, else UNKNOWN) while the upstream may still be running it; make --lease at least --upstream-timeout",
			"upstream_timeout", p.cfg.UpstreamTimeout.String(), "lease", lease.String())
	}
	if cfg.ReconcileURL != "" {
		rc, err := newReconciler("--reconcile-url", cfg.ReconcileURL, cfg.ReconcileToken, g.transport, p.cfg.ReplayHeaders)
		if err != nil {
			return nil, err
		}
		p.reconcilers[""] = rc
	}
	fallback, err := g.routeHandler(p, Route{}, g.reverseProxy(p, p.cfg.UpstreamTimeout, ""))
	if err != nil {
		return nil, err
	}
	entries := make([]*routeEntry, len(cfg.Routes))
	for i, rt := range cfg.Routes {
		timeout := p.cfg.UpstreamTimeout
		if rt.UpstreamTimeout != nil {
			if *rt.UpstreamTimeout <= 0 {
				return nil, &FieldError{Path: fmt.Sprintf("routes[%d].upstream-timeout", i), Err: fmt.Errorf("%v: want a positive duration", *rt.UpstreamTimeout)}
			}
			timeout = *rt.UpstreamTimeout
		}
		if entries[i], err = g.routeHandler(p, rt, g.reverseProxy(p, timeout, rt.label())); err != nil {
			return nil, inField(fmt.Sprintf("routes[%d]", i), err)
		}
	}
	t, err := newRouteTable(cfg.Routes, entries, fallback, cfg.ErrorFormat, g.rejected)
	if err != nil {
		return nil, err
	}
	t.maxBody = cmp.Or(cfg.MaxBody, defaultMaxBody)
	p.handler = t
	// Whether the gateway reconciles is fixed at its start: the engine's
	// Reconcile, the sweep (--reconcile-every) and the Retry-After that
	// invites a retry of an UNKNOWN key to find it reconciled.
	switch {
	case len(p.reconcilers) > 0 && !g.reconciles:
		return nil, errors.New("gateway: a reconcile URL needs a gateway started with one (--reconcile-url or a route's): the engine reconciles or not from its start; restart to add the first")
	case len(p.reconcilers) == 0 && g.reconciles:
		return nil, errors.New("gateway: this configuration has no reconcile URL (--reconcile-url or a route's) and the gateway started with one: " +
			"its sweep and the Retry-After of its outcome_unknown answers would go on without a lookup; restart to remove the last")
	}
	return p, nil
}

// routeHandler builds the handler of one route; the zero Route is the
// top level's, for the requests no route matches.
func (g *Gateway) routeHandler(p *policy, rt Route, proxy http.Handler) (*routeEntry, error) {
	cfg := p.cfg
	timeout := cfg.UpstreamTimeout
	if rt.UpstreamTimeout != nil {
		timeout = *rt.UpstreamTimeout
	}
	label := rt.label()
	if rt.PassThrough {
		if !rt.protectionUnset() {
			return nil, &FieldError{Path: "pass-through", Err: errors.New("a pass-through route is forwarded without idempotency: it takes no other option but match, name and upstream-timeout")}
		}
		g.tel.route(label, true)
		return &routeEntry{Handler: g.withWriteDeadline(g.tel.passedThrough(proxy, label), 0, timeout)}, nil
	}
	g.tel.route(label, false)
	onOutcome := func(r *http.Request, o idemhttp.Outcome) { g.onOutcome(r, o, label) }
	o := idemhttp.Options{Methods: cfg.Methods, RequireKey: cfg.RequireKey, MaxBody: cfg.MaxBody, Wait: cfg.Wait,
		LeaseDuration: cfg.Lease, Retention: cfg.Retention, FailOpen: cfg.FailOpen, Logger: cfg.Logger,
		Tenant: g.tenant, MaxResponseBuffer: cfg.MaxResponse, ErrorFormat: cfg.ErrorFormat,
		MismatchStatus: cfg.MismatchStatus, ReplayHeaders: cfg.ReplayHeaders, OnOutcome: onOutcome,
		Repeatability: cfg.Repeatability, KeyRetention: cfg.KeyRetention}
	o.AllowAnonymous = g.cfg.AllowAnonymous // g.tenant answers "" for an anonymous request only then
	o.Label = requestLabel(rt)
	if err := rt.override(&o); err != nil {
		return nil, err
	}
	if err := rt.checkLease(cmp.Or(o.LeaseDuration, defaultLease), timeout); err != nil {
		return nil, err
	}
	fp, err := rt.Fingerprint.compile()
	if err != nil {
		return nil, inField("fingerprint", err)
	}
	if rt.ReconcileURL != "" {
		if rt.Name == "" {
			return nil, &FieldError{Path: "name", Err: errors.New("a route with its own reconcile-url needs a name: its keys carry it, so that their lookup asks this route's URL")}
		}
		rc, err := newReconciler("reconcile-url", rt.ReconcileURL, cfg.ReconcileToken, g.transport, cfg.ReplayHeaders)
		if err != nil {
			return nil, &FieldError{Path: "reconcile-url", Err: err}
		}
		p.reconcilers[rt.Name] = rc
		fp = tagFingerprint(rt.Name, fp)
	}
	o.Fingerprint = fp
	if o.StatusPolicy, err = rt.Statuses.compile(statusPolicy(cfg.ErrorFormat)); err != nil {
		return nil, inField("statuses", err)
	}
	if o.Methods == nil {
		o.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	// A HEAD runs the GET endpoint (ServeMux, Rails, Express, Spring,
	// Django): protected wherever GET is, under its own fingerprint
	// (method HEAD), so a HEAD reusing a GET's key is a mismatch.
	o.Methods = httpwire.WithHead(o.Methods)
	mw, err := idemhttp.New(g.engine, &o)
	if err != nil {
		return nil, err
	}
	if err := rt.checkMethods(o.Methods); err != nil {
		return nil, err
	}
	h := refuseHopByHopKeys(mw(proxy), o.Methods, g.keyed, cfg.ErrorFormat, func(r *http.Request) { onOutcome(r, idemhttp.OutcomeRejected) })
	if h, err = rt.keySource(h, o); err != nil {
		return nil, &FieldError{Path: "key-from", Err: err}
	}
	return &routeEntry{Handler: g.withWriteDeadline(h, o.Wait, timeout), methods: o.Methods}, nil
}

// defaultLease is the lease of a gateway without --lease: the engine's
// default (idem.Options.LeaseDuration).
const defaultLease = 30 * time.Second

// checkLease refuses a route whose lease is shorter than its upstream
// timeout, when the route sets either. A key's lease outlives a gateway
// that crashed while its request was upstream; once it ends, a retry
// takes the key over (reconciles it, or with --takeover run sends it
// again). Ending before the upstream timeout, it would let that happen
// while the gateway, had it lived, would still be waiting for the
// upstream's answer: the request may still be running there. Equal is
// enough: by the end of the lease the gateway would have cut the call.
// (The top level's own pair is warned about in compile.)
func (rt Route) checkLease(lease, timeout time.Duration) error {
	if lease >= timeout {
		return nil
	}
	err := fmt.Errorf("the upstream timeout %v is longer than the lease %v: a key whose gateway died mid-request could be taken over, and run again, while the upstream may still be running it; make the lease at least the upstream timeout", timeout, lease)
	switch {
	case rt.UpstreamTimeout != nil:
		return &FieldError{Path: "upstream-timeout", Err: err}
	case rt.Lease != nil:
		return &FieldError{Path: "lease", Err: err}
	}
	return nil // both the top level's
}

// checkMethods refuses a protected route whose pattern names a method
// that its methods (its own, or the top level's) do not protect: the
// route takes those requests from the top level, which may protect them,
// and forwards them unprotected (a keyed POST to "POST /x" with methods
// [PATCH] ran twice), and its options can never apply. A pattern without
// a method matches every method: then any methods are its own. "GET"
// matches HEAD too, as in http.ServeMux, but HEAD alone does not cover
// it: its GETs would run unprotected ("GET /v1/report" with methods
// [HEAD] forwarded every GET). GET covers HEAD (httpwire.WithHead has
// added it to methods), so "HEAD /x" with methods [GET] is protected.
func (rt Route) checkMethods(methods []string) error {
	method := patternMethod(rt.Pattern)
	if method == "" || slices.Contains(methods, method) {
		return nil
	}
	whose, field := "the top level's methods", "match"
	if rt.Methods != nil {
		whose, field = "its methods", "methods"
	}
	only := method + " requests only"
	if method == http.MethodGet {
		only = "GET requests (and HEAD, which protecting GET covers)"
	}
	return &FieldError{Path: field, Err: fmt.Errorf("the route matches %s (%q), which %s %v do not protect: "+
		"it would forward them without idempotency and none of its options would apply; add %s to the route's methods, "+
		"or say pass-through: true", only, rt.Pattern, whose, methods, method)}
}

// checkHost refuses a pattern that names a host ([METHOD ]HOST/PATH),
// which the gateway cannot honour: it forwards every request to its one
// upstream with the upstream's own Host, so the client's Host selects no
// endpoint, and a request sent with another Host than the pattern's (an
// alias, an IP address) reached the same endpoint outside the route's
// policy (with POST api.example.com/v2/orders keyed by json:/request_id,
// an order sent to Host 10.0.0.7 ran again). It reads the pattern as
// ServeMux does, once ServeMux has taken it.
func checkHost(pattern string) error {
	method, rest := "", pattern
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		method, rest = pattern[:i], strings.TrimLeft(pattern[i+1:], " \t")
	}
	slash := strings.IndexByte(rest, '/')
	if slash <= 0 {
		return nil // no host (or no path, which ServeMux refuses)
	}
	without := rest[slash:]
	if method != "" {
		without = method + " " + without
	}
	return fmt.Errorf("%q names the host %q, which cannot be honoured: the gateway forwards every request to its one upstream "+
		"with the upstream's own Host, so a request for any Host reaches the same endpoint, and one sent with another Host "+
		"(an alias, an IP address) would escape the route; write the pattern without the host: %q", pattern, rest[:slash], without)
}

// patternMethod is the method of a ServeMux pattern ([METHOD ]/PATH),
// in upper case as the router compares it; "" when it names none.
func patternMethod(pattern string) string {
	pattern = strings.TrimSpace(pattern)
	i := strings.IndexAny(pattern, " \t")
	if i < 0 {
		return ""
	}
	return strings.ToUpper(pattern[:i]) // canonPattern's reading
}

// protectionUnset reports whether rt sets none of the options of a
// protected route.
func (rt Route) protectionUnset() bool {
	return rt.Methods == nil && rt.RequireKey == nil && rt.Lease == nil && rt.Retention == nil && rt.Wait == nil &&
		rt.KeyFrom == "" && rt.Fingerprint.isWhole() && rt.Statuses.isEmpty() && rt.ReconcileURL == ""
}

// override applies the route's own settings to the top level's options.
func (rt Route) override(o *idemhttp.Options) error {
	if rt.Methods != nil {
		if len(rt.Methods) == 0 {
			return &FieldError{Path: "methods", Err: errors.New("an empty list protects nothing: say pass-through: true")}
		}
		o.Methods = upperMethods(rt.Methods)
	}
	if rt.RequireKey != nil {
		o.RequireKey = *rt.RequireKey
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		to   *time.Duration
		zero bool // zero is a valid value
	}{{"lease", rt.Lease, &o.LeaseDuration, false}, {"retention", rt.Retention, &o.Retention, false}, {"wait", rt.Wait, &o.Wait, true}} {
		switch {
		case d.v == nil:
		case *d.v < 0 || (*d.v == 0 && !d.zero):
			return &FieldError{Path: d.name, Err: fmt.Errorf("%v: want a positive duration", *d.v)}
		case d.name == "lease" && *d.v < time.Millisecond:
			return &FieldError{Path: d.name, Err: fmt.Errorf("%v is under the 1ms resolution of stores", *d.v)}
		case d.name != "wait" && *d.v > store.MaxDuration:
			return &FieldError{Path: d.name, Err: fmt.Errorf("%v is above %v, the longest a store keeps", *d.v, store.MaxDuration)}
		default:
			*d.to = *d.v
		}
	}
	if rt.Retention != nil && o.KeyRetention > 0 && *rt.Retention >= o.KeyRetention {
		return &FieldError{Path: "retention", Err: fmt.Errorf("%v is not shorter than --key-retention %v, so the route would remember no key past its response: "+
			"make the route's retention shorter than --key-retention, or --key-retention longer", *rt.Retention, o.KeyRetention)}
	}
	return nil
}

// upperMethods is a list of methods in upper case: a method is matched
// without case (a request's own must be in upper case, checkTarget), so
// "post" in a configuration protects POST.
func upperMethods(methods []string) []string {
	if methods == nil {
		return nil
	}
	out := make([]string, len(methods))
	for i, m := range methods {
		out[i] = strings.ToUpper(strings.TrimSpace(m))
	}
	return out
}

// withWriteDeadline gives the requests of a route whose wait and upstream
// timeout need more time than the public server's write timeout (set at
// start from the longest of them then) the time they need: a reload may
// lengthen a wait or an upstream timeout, and the server would otherwise
// cut the answer.
func (g *Gateway) withWriteDeadline(next http.Handler, wait, upstreamTimeout time.Duration) http.Handler {
	need := g.cfg.ReadTimeout + wait + upstreamTimeout + idem.FinalizeTimeout + answerTime
	if need <= g.cfg.writeTimeout() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(need)) // a writer without deadlines keeps none
		next.ServeHTTP(w, r)
	})
}

// routeTagPrefix begins the fingerprint of a key taken on a route with its
// own reconcile URL: route:NAME:HEX. A record keeps its fingerprint, so the
// lookup of an UNKNOWN key, made from the record alone (by a retry, the
// sweep or the console), knows the route it came from.
const routeTagPrefix = "route:"

func tagFingerprint(name string, fp func(*http.Request, []byte) string) func(*http.Request, []byte) string {
	tag := routeTagPrefix + name + ":"
	return func(r *http.Request, body []byte) string { return tag + fp(r, body) }
}

// reconcile is the engine's Reconcile: the lookup of the route the key's
// fingerprint names, else the top-level one, in the running policy.
func (p *policy) reconcile(ctx context.Context, rec store.Record) (idem.Resolution, error) {
	name := ""
	if rest, ok := strings.CutPrefix(rec.Fingerprint, routeTagPrefix); ok {
		name, _, _ = strings.Cut(rest, ":")
	}
	rc, ok := p.reconcilers[name]
	switch {
	case ok:
		return rc.reconcile(ctx, rec)
	case name != "":
		return idem.Resolution{}, fmt.Errorf("the key was taken on route %q, which has no reconcile-url in the running configuration: it stays UNKNOWN until one is configured or an operator resolves it", name)
	}
	return idem.Resolution{Verdict: idem.VerdictUnknown}, nil // no top-level lookup: only an operator can tell
}
