package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// reloadGateway serves a gateway in front of up with cfg's routes.
func reloadGateway(t *testing.T, up *routeUpstream, cfg Config) (*Gateway, *routeClient) {
	t.Helper()
	cfg.Upstream, _ = url.Parse(up.URL)
	cfg.AllowAnonymous = true
	if cfg.Store == nil {
		cfg.Store, _ = memstore.New(nil)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	return g, &routeClient{t: t, up: up, g: g, srv: srv}
}

// A request in flight across a reload finishes under the policy it started
// with: its 429, which its route stored, is stored, though the new policy
// would release it; the request after the reload runs under the new one.
func TestInFlightRequestKeepsItsPolicyAcrossReload(t *testing.T) {
	up := newRouteUpstream(t)
	storing := []Route{{Pattern: "POST /slow/{status}", Statuses: StatusOverrides{Store: []string{"429"}}}}
	g, c := reloadGateway(t, up, Config{Routes: storing})
	done := make(chan reply, 1)
	go func() { done <- c.send("POST", "/slow/429", "old", "{}") }()
	<-up.arrived
	if err := g.Reload(func() (Config, error) { return Config{Upstream: mustURL(t, up.URL)}, nil }); err != nil {
		t.Fatal(err)
	}
	close(up.release)
	c.want("the request in flight", <-done, http.StatusTooManyRequests, false)
	c.want("its retry, after the reload", c.send("POST", "/slow/429", "old", "{}"), http.StatusTooManyRequests, true)
	c.want("a new request", c.send("POST", "/slow/429", "new", "{}"), http.StatusTooManyRequests, false)
	c.want("its retry, released by the new policy", c.send("POST", "/slow/429", "new", "{}"), http.StatusTooManyRequests, false)
	if c.runs("old") != 1 || c.runs("new") != 2 {
		t.Fatalf("runs: old %d, new %d; want 1 (stored under the old policy) and 2", c.runs("old"), c.runs("new"))
	}
}

// A reload that fails keeps the running configuration, says why, and
// shows in the metrics; the next good one is applied.
func TestBadReloadKeepsTheRunningConfig(t *testing.T) {
	up := newRouteUpstream(t)
	required := []Route{{Pattern: "POST /v1/charges", RequireKey: ptr(true)}}
	g, c := reloadGateway(t, up, Config{Routes: required})
	metric := func(name string, labels ...string) float64 {
		for _, mf := range must(g.registry.Gather()) {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if len(labels) == 0 || m.GetLabel()[0].GetValue() == labels[0] {
					if m.Counter != nil {
						return m.Counter.GetValue()
					}
					return m.Gauge.GetValue()
				}
			}
		}
		t.Fatalf("no metric %s%v", name, labels)
		return 0
	}
	started := metric("idem_config_last_reload_success_timestamp_seconds")
	if started < float64(time.Now().Add(-time.Minute).Unix()) || metric("idem_config_last_reload_successful") != 1 {
		t.Fatalf("at start: last success %v, successful %v; want now and 1", started, metric("idem_config_last_reload_successful"))
	}
	conflicting := Config{Upstream: mustURL(t, up.URL), Routes: []Route{
		{Pattern: "POST /v1/{a}/x"}, {Pattern: "POST /v1/x/{b}", Source: "idem.yaml:9"}}}
	for _, bad := range []func() (Config, error){
		func() (Config, error) { return Config{}, errors.New("idem.yaml:3: lease: bad") },
		func() (Config, error) { return conflicting, nil },
	} {
		if err := g.Reload(bad); err == nil {
			t.Fatal("a bad reload succeeded")
		}
	}
	c.want("a charge without a key after the bad reloads", c.send("POST", "/v1/charges", "", "{}"), http.StatusBadRequest, false)
	if f, s := metric("idem_config_reloads_total", "failure"), metric("idem_config_last_reload_successful"); f != 2 || s != 0 {
		t.Fatalf("failures %v, successful %v; want 2 and 0", f, s)
	}
	if err := g.Reload(func() (Config, error) { return Config{Upstream: mustURL(t, up.URL)}, nil }); err != nil {
		t.Fatal(err)
	}
	c.want("a charge without a key after a good reload", c.send("POST", "/v1/charges", "", "{}"), http.StatusCreated, false)
	if n, s := metric("idem_config_reloads_total", "success"), metric("idem_config_last_reload_successful"); n != 1 || s != 1 {
		t.Fatalf("successes %v, successful %v; want 1 and 1", n, s)
	}
	if got := metric("idem_config_last_reload_success_timestamp_seconds"); got < started {
		t.Fatalf("last success %v went back from %v", got, started)
	}
}

// A bad route is an error that names its field, as the config file
// names it, for cmd/idem to add the line.
func TestRouteErrorsNameTheField(t *testing.T) {
	up := newRouteUpstream(t)
	u := mustURL(t, up.URL)
	store, _ := memstore.New(nil)
	for _, c := range []struct {
		routes    []Route
		path, msg string
	}{
		{[]Route{{Pattern: "POST /a"}, {Pattern: "POST /{x}"}, {Pattern: "POST /{y}", Source: "f.yaml:7"}},
			"routes[2].match", `"POST /{y}" conflicts with routes[1] "POST /{x}"`},
		{[]Route{{Pattern: "POST /{x}/b"}, {Pattern: "POST /a/{y}"}}, "routes[1].match", "conflicts with routes[0]"},
		{[]Route{{Pattern: "POST /a/{x"}}, "routes[0].match", "bad wildcard"},
		{[]Route{{Pattern: ""}}, "routes[0].match", "a pattern is required"},
		{[]Route{{Pattern: "/a", Lease: ptr(time.Duration(0))}}, "routes[0].lease", "want a positive duration"},
		{[]Route{{Pattern: "/a", Wait: ptr(-time.Second)}}, "routes[0].wait", "want a positive duration"},
		{[]Route{{Pattern: "/a", Lease: ptr(87601 * time.Hour)}}, "routes[0].lease", "is above 87600h0m0s, the longest a store keeps"},
		{[]Route{{Pattern: "/a", Retention: ptr(87601 * time.Hour)}}, "routes[0].retention", "is above 87600h0m0s, the longest a store keeps"},
		{[]Route{{Pattern: "/a", Methods: []string{}}}, "routes[0].methods", "pass-through"},
		{[]Route{{Pattern: "/a", PassThrough: true, Wait: ptr(time.Second)}}, "routes[0].pass-through", "no other option"},
		{[]Route{{Pattern: "/a", KeyFrom: "body:/id"}}, "routes[0].key-from", "want header, or json:"},
		{[]Route{{Pattern: "/a", KeyFrom: "json:id"}}, "routes[0].key-from", "does not start with /"},
		{[]Route{{Pattern: "/a", Fingerprint: FingerprintRule{Ignore: []string{"/a", "/b~2"}}}}, "routes[0].fingerprint.ignore[1]", "~ must be followed by 0 or 1"},
		{[]Route{{Pattern: "/a", Fingerprint: FingerprintRule{Only: []string{""}}}}, "routes[0].fingerprint.only[0]", "the whole body"},
		{[]Route{{Pattern: "/a", Fingerprint: FingerprintRule{Only: []string{"/a"}, Ignore: []string{"/b"}}}}, "routes[0].fingerprint", "not both"},
		{[]Route{{Pattern: "/a", Statuses: StatusOverrides{Store: []string{"409"}, Unknown: []string{"409"}}}}, "routes[0].statuses.unknown[0]", "already listed in store[0]"},
		{[]Route{{Pattern: "/a", Statuses: StatusOverrides{Release: []string{"6xx"}}}}, "routes[0].statuses.release[0]", "want a status from 100 to 599"},
		{[]Route{{Pattern: "/a", ReconcileURL: u.String() + "/{key}"}}, "routes[0].name", "needs a name"},
		{[]Route{{Pattern: "/a", Name: "a", ReconcileURL: u.String()}}, "routes[0].reconcile-url", "must hold {key}"},
		{[]Route{{Pattern: "/a", Name: "a b"}}, "routes[0].name", "want up to 64 letters"},
		{[]Route{{Pattern: "/a", Name: "x"}, {Pattern: "/b", Name: "x", Source: "f.yaml:3"}}, "routes[1].name", "routes[0] too"},
		{[]Route{{Pattern: "/a", UpstreamTimeout: ptr(time.Duration(0))}}, "routes[0].upstream-timeout", "want a positive duration"},
		{[]Route{{Pattern: "/a", UpstreamTimeout: ptr(5 * time.Minute)}}, "routes[0].upstream-timeout", "the upstream timeout 5m0s is longer than the lease 30s"},
		{[]Route{{Pattern: "/a", Lease: ptr(10 * time.Second)}}, "routes[0].lease", "the upstream timeout 30s is longer than the lease 10s"},
		// A route that takes requests of a method it does not protect:
		// a keyed POST ran twice (the top level would have protected it).
		{[]Route{{Pattern: "POST /disjoint", Methods: []string{"PATCH"}}}, "routes[0].methods", "matches POST requests only"},
		{[]Route{{Pattern: "GET /getroute", Lease: ptr(time.Minute), RequireKey: ptr(true)}}, "routes[0].match", "the top level's methods [POST PATCH] do not protect"},
		{[]Route{{Pattern: "post\t/x", Methods: []string{"PUT"}}}, "routes[0].methods", "matches POST requests only"},
		// ServeMux's GET pattern matches HEAD too, but HEAD alone left its
		// GETs unprotected: a keyed GET to "GET /v1/report" ran twice.
		{[]Route{{Pattern: "GET /v1/report", Methods: []string{"HEAD"}}}, "routes[0].methods", "add GET to the route's methods"},
		{[]Route{{Pattern: "GET /v1/report", Methods: []string{"head"}, RequireKey: ptr(true)}}, "routes[0].methods", "add GET to the route's methods"},
	} {
		_, err := New(Config{Upstream: u, Store: store, Routes: c.routes, Logger: slog.New(slog.DiscardHandler)})
		fe, ok := errors.AsType[*FieldError](err)
		if !ok || fe.Path != c.path || !strings.Contains(fe.Err.Error(), c.msg) || strings.Contains(err.Error(), "registered at") {
			t.Errorf("routes %+v: %v; want a FieldError about %s saying %q", c.routes, err, c.path, c.msg)
		}
	}
}

// A route whose lookup is gone from the running configuration leaves its
// UNKNOWN keys UNKNOWN: no other route's lookup is asked for them (its
// "never ran" would run the request again). The retry itself now falls
// under the top level, whose fingerprint differs: 422, never a run.
func TestReloadWithoutTheRoutesLookupKeepsItsKeysUnknown(t *testing.T) {
	up := newRouteUpstream(t)
	routes := []Route{{Pattern: "POST /v1/charges/{status}", Name: "charges", ReconcileURL: up.URL + "/lookup/charges/{key}"}}
	g, c := reloadGateway(t, up, Config{ReconcileURL: up.URL + "/lookup/top/{key}", Routes: routes})
	c.want("a charge lost in a gateway timeout", c.send("POST", "/v1/charges/504", "k", "{}"), http.StatusGatewayTimeout, false)
	if err := g.Reload(func() (Config, error) {
		return Config{Upstream: mustURL(t, up.URL), ReconcileURL: up.URL + "/lookup/top/{key}"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	c.want("the retry", c.send("POST", "/v1/charges/504", "k", "{}"), http.StatusUnprocessableEntity, false)
	v, rec, err := g.Engine().Reconcile(context.Background(), store.ID{Key: "k"}) // as the sweep and the console do
	if v != idem.VerdictUnknown || rec.State != store.StateUnknown {
		t.Fatalf("Reconcile = %v, %v, %v; want the key left UNKNOWN", v, rec.State, err)
	}
	if len(up.lookups) != 0 || c.runs("k") != 1 {
		t.Fatalf("lookups %q, runs %d; want none and 1", up.lookups, c.runs("k"))
	}
}

// A gateway started without any reconcile URL cannot get one by reload:
// the engine reconciles or not from its start.
func TestReloadCannotAddTheFirstReconcileURL(t *testing.T) {
	up := newRouteUpstream(t)
	g, _ := reloadGateway(t, up, Config{})
	err := g.Reload(func() (Config, error) {
		return Config{Upstream: mustURL(t, up.URL), ReconcileURL: up.URL + "/lookup/{key}"}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("Reload adding a reconcile URL = %v; want an error saying to restart", err)
	}
}

// Nor can a gateway started with one lose the last by reload: its sweep
// would go on without a lookup, and its UNKNOWN keys' 503s would still
// invite a retry (Retry-After) that no lookup settles.
func TestReloadCannotRemoveTheLastReconcileURL(t *testing.T) {
	up := newRouteUpstream(t)
	g, _ := reloadGateway(t, up, Config{ReconcileURL: up.URL + "/lookup/{key}", ReconcileEvery: time.Minute})
	err := g.Reload(func() (Config, error) { return Config{Upstream: mustURL(t, up.URL)}, nil })
	if err == nil || !strings.Contains(err.Error(), "restart to remove the last") {
		t.Fatalf("Reload removing the reconcile URL = %v; want an error saying to restart", err)
	}
	if got := g.current.Load().reconcilers; len(got) != 1 {
		t.Fatalf("running lookups %v; want the one it started with", got)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A route's methods need not name its pattern's method when it has none,
// when they name it in another case, when it is HEAD and they name GET
// (which protects HEAD: a HEAD runs the GET endpoint), or when the route
// is passed through.
func TestRouteMethodsCoverTheirPattern(t *testing.T) {
	up := newRouteUpstream(t)
	store, _ := memstore.New(nil)
	for _, rt := range []Route{
		{Pattern: "/any", Methods: []string{"PATCH"}},
		{Pattern: "POST /x", Methods: []string{"post", "PATCH"}},
		{Pattern: "HEAD /y", Methods: []string{"GET"}},
		{Pattern: "GET /z", PassThrough: true},
		{Pattern: "PATCH /w"},
	} {
		if _, err := New(Config{Upstream: mustURL(t, up.URL), Store: store, Routes: []Route{rt}, Logger: slog.New(slog.DiscardHandler)}); err != nil {
			t.Errorf("route %+v refused: %v", rt, err)
		}
	}
}

// A key retention that is not longer than a route's retention would
// remember none of the route's keys past their response: refused.
func TestRouteRetentionUnderTheKeyRetention(t *testing.T) {
	up := newRouteUpstream(t)
	store, _ := memstore.New(nil)
	cfg := Config{Upstream: mustURL(t, up.URL), Store: store, Retention: time.Hour, KeyRetention: 24 * time.Hour, Logger: slog.New(slog.DiscardHandler),
		Routes: []Route{{Pattern: "POST /a", Retention: ptr(48 * time.Hour)}}}
	_, err := New(cfg)
	fe, ok := errors.AsType[*FieldError](err)
	if !ok || fe.Path != "routes[0].retention" || !strings.Contains(err.Error(), "--key-retention 24h0m0s") {
		t.Fatalf("a route's retention 48h over --key-retention 24h: %v; want a FieldError about routes[0].retention naming --key-retention", err)
	}
	cfg.Routes[0].Retention = ptr(2 * time.Hour)
	if _, err := New(cfg); err != nil {
		t.Fatalf("a route's retention 2h under --key-retention 24h: %v", err)
	}
}

// A negative upstream timeout would answer every request 502: refused.
func TestNegativeUpstreamTimeout(t *testing.T) {
	up := newRouteUpstream(t)
	store, _ := memstore.New(nil)
	_, err := New(Config{Upstream: mustURL(t, up.URL), Store: store, UpstreamTimeout: -time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "--upstream-timeout -1s") {
		t.Fatalf("New with UpstreamTimeout -1s = %v; want an error naming --upstream-timeout", err)
	}
}

// A reload cannot turn key retention off once the gateway started with
// one: the engine applies the start's to every key that gives none, so a
// reloaded 0 was logged as applied while new keys kept the old one.
// From a start without one, a reload may set one and take it back.
func TestReloadCannotTurnKeyRetentionOff(t *testing.T) {
	up := newRouteUpstream(t)
	g, _ := reloadGateway(t, up, Config{KeyRetention: 48 * time.Hour})
	err := g.Reload(func() (Config, error) { return Config{Upstream: mustURL(t, up.URL)}, nil })
	if err == nil || !strings.Contains(err.Error(), "--key-retention") || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("Reload of key retention 48h to 0 = %v; want an error naming --key-retention, saying to restart", err)
	}
	if err := g.Reload(func() (Config, error) { return Config{Upstream: mustURL(t, up.URL), KeyRetention: 72 * time.Hour}, nil }); err != nil {
		t.Fatalf("Reload of key retention 48h to 72h: %v", err)
	}
	g, _ = reloadGateway(t, up, Config{})
	for _, kr := range []time.Duration{48 * time.Hour, 0} {
		if err := g.Reload(func() (Config, error) { return Config{Upstream: mustURL(t, up.URL), KeyRetention: kr}, nil }); err != nil {
			t.Fatalf("Reload of key retention to %v on a gateway started without one: %v", kr, err)
		}
	}
}

// A reload to "GET /v1/report" with methods [HEAD] is refused as a start
// would be (TestRouteErrorsNameTheField): its GETs would run unprotected.
// The running policy stays: a keyed GET still runs once.
func TestReloadRefusesHeadAloneOnAGetRoute(t *testing.T) {
	up := newRouteUpstream(t)
	route := Route{Pattern: "GET /v1/report", Methods: []string{"GET"}, RequireKey: ptr(true)}
	g, c := reloadGateway(t, up, Config{Routes: []Route{route}})
	route.Methods = []string{"HEAD"}
	err := g.Reload(func() (Config, error) { return Config{Upstream: mustURL(t, up.URL), Routes: []Route{route}}, nil })
	if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Path != "routes[0].methods" || !strings.Contains(err.Error(), "add GET") {
		t.Fatalf("Reload to methods [HEAD] on GET /v1/report = %v; want a FieldError about routes[0].methods saying to add GET", err)
	}
	c.want("a keyed GET", c.send("GET", "/v1/report", "r", ""), http.StatusCreated, false)
	c.want("its retry", c.send("GET", "/v1/report", "r", ""), http.StatusCreated, true)
	c.want("a GET without a key", c.send("GET", "/v1/report", "", ""), http.StatusBadRequest, false)
}
