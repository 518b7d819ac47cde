package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// routeUpstream counts the executions of each key, answers a path that
// ends in /NNN (or a query status=NNN) with that status, holds a path under /slow/ until release
// is closed, and answers a lookup (GET /lookup...) 404 "never ran",
// recording which lookup was asked.
type routeUpstream struct {
	*httptest.Server
	release chan struct{}
	arrived chan struct{} // a value per request held under /slow/

	mu      sync.Mutex
	runs    map[string]int // by the Idempotency-Key the upstream got
	bodies  []string
	lookups []string
}

func newRouteUpstream(t *testing.T) *routeUpstream {
	u := &routeUpstream{release: make(chan struct{}), arrived: make(chan struct{}, 16), runs: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(idemhttp.HeaderKey)
		if strings.HasPrefix(r.URL.Path, "/lookup") {
			u.mu.Lock()
			u.lookups = append(u.lookups, r.URL.Path)
			u.mu.Unlock()
			w.Header().Set(idemhttp.HeaderKey, key)
			w.WriteHeader(http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.runs[key]++
		u.bodies = append(u.bodies, string(b))
		u.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/slow/") {
			u.arrived <- struct{}{}
			<-u.release
		}
		status := http.StatusCreated
		if i := strings.LastIndexByte(r.URL.Path, '/'); i >= 0 {
			if s, err := strconv.Atoi(r.URL.Path[i+1:]); err == nil && s >= 200 {
				status = s
			}
		}
		if s, err := strconv.Atoi(r.URL.Query().Get("status")); err == nil {
			status = s
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, "run %d of %s", u.count(key), key)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *routeUpstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.runs[key]
}

// routeClient sends requests to a gateway with routes.
type routeClient struct {
	t   *testing.T
	up  *routeUpstream
	g   *Gateway
	srv *httptest.Server
	key string // a prefix that keeps the cases' keys apart

	acquired chan struct{} // a value each time a key was looked up in the store
}

// reply is what the gateway answered.
type reply struct {
	status   int
	replayed bool
	code     string // the problem's code, if any
	body     string
}

// send sends method path with body (as JSON) and the header pairs;
// key, when not empty, is sent as Idempotency-Key (prefixed).
func (c *routeClient) send(method, path, key, body string, hdr ...string) reply {
	c.t.Helper()
	return c.sendAs(method, "", path, key, body, hdr...)
}

func (c *routeClient) runs(key string) int { return c.up.count(c.key + key) }

// record returns the stored record of key (the anonymous tenant's).
func (c *routeClient) record(key string) store.Record {
	c.t.Helper()
	rec, err := c.g.Engine().Get(context.Background(), store.ID{Key: c.key + key})
	if err != nil {
		c.t.Fatalf("Get %s: %v", key, err)
	}
	return rec
}

func (c *routeClient) want(what string, got reply, status int, replayed bool) {
	c.t.Helper()
	if got.status != status || got.replayed != replayed {
		c.t.Fatalf("%s = %d (replayed %v) %s; want %d (replayed %v)", what, got.status, got.replayed, got.body, status, replayed)
	}
}

func ptr[T any](v T) *T { return &v }

// routeCases are the route options, each checked against the behaviour
// of the top level (no route) where the option makes a difference.
var routeCases = []struct {
	name   string
	cfg    func(c *Config, up *routeUpstream)
	routes []Route
	check  func(c *routeClient)
}{
	{name: "match picks the most specific pattern; a cleaned path gets its route", routes: []Route{
		{Pattern: "POST /v1/charges/{id}", RequireKey: ptr(true)},
		{Pattern: "POST /v1/charges/search", PassThrough: true},
	}, check: func(c *routeClient) {
		c.want("a charge without a key", c.send("POST", "/v1/charges/ch_1", "", "{}"), http.StatusBadRequest, false)
		c.want("the same through //", c.send("POST", "/v1//charges/ch_1", "", "{}"), http.StatusBadRequest, false)
		c.want("search, more specific, without a key", c.send("POST", "/v1/charges/search", "", "{}"), http.StatusCreated, false)
		c.want("a path no route matches", c.send("POST", "/v1/other", "", "{}"), http.StatusCreated, false)
	}},
	{name: "pass-through", routes: []Route{{Pattern: "POST /v1/search", PassThrough: true}}, check: func(c *routeClient) {
		for range 2 {
			c.want("a search", c.send("POST", "/v1/search", "s", "{}"), http.StatusCreated, false)
		}
		c.want("the top level", c.send("POST", "/v1/charges", "c", "{}"), http.StatusCreated, false)
		c.want("the top level's retry", c.send("POST", "/v1/charges", "c", "{}"), http.StatusCreated, true)
		if c.runs("s") != 2 || c.runs("c") != 1 {
			c.t.Fatalf("runs: search %d, charge %d; want 2 (not protected) and 1", c.runs("s"), c.runs("c"))
		}
		// Issue 31, item 13: they are requests too.
		// Issue 36, item 2: by route, an unnamed one by its match.
		if got := scrape(c.t, c.g)[`idem_requests_total{outcome="pass_through",route="POST /v1/search"}`]; got != 2 {
			c.t.Fatalf(`idem_requests_total{outcome="pass_through",route="POST /v1/search"} = %v; want the 2 searches`, got)
		}
	}},
	{name: "methods", routes: []Route{{Pattern: "/v1/items/{id}", Methods: []string{"put"}}}, check: func(c *routeClient) {
		c.want("a PUT", c.send("PUT", "/v1/items/1", "p", "{}"), http.StatusCreated, false)
		c.want("its retry", c.send("PUT", "/v1/items/1", "p", "{}"), http.StatusCreated, true)
		c.want("a POST", c.send("POST", "/v1/items/1", "q", "{}"), http.StatusCreated, false)
		c.want("another POST", c.send("POST", "/v1/items/1", "q", "{}"), http.StatusCreated, false)
	}},
	{name: "require-key", routes: []Route{{Pattern: "POST /v1/charges", RequireKey: ptr(true)}}, check: func(c *routeClient) {
		got := c.send("POST", "/v1/charges", "", "{}")
		c.want("a charge without a key", got, http.StatusBadRequest, false)
		if got.code != idemhttp.CodeKeyRequired {
			c.t.Fatalf("code %q; want %s", got.code, idemhttp.CodeKeyRequired)
		}
		c.want("elsewhere without a key", c.send("POST", "/v1/refunds", "", "{}"), http.StatusCreated, false)
	}},
	{name: "lease", routes: []Route{{Pattern: "POST /slow/exports", Lease: ptr(5 * time.Minute)}}, check: func(c *routeClient) {
		done := make(chan reply, 1)
		go func() { done <- c.send("POST", "/slow/exports", "e", "{}") }()
		<-c.up.arrived // the lease was taken before
		rec := c.record("e")
		close(c.up.release)
		c.want("the export", <-done, http.StatusCreated, false)
		if rec.State != store.StateProcessing || rec.TTL <= time.Minute || rec.TTL > 5*time.Minute {
			c.t.Fatalf("in flight: %v with %v to live; want PROCESSING with the route's 5m lease (the top level's is 30s)", rec.State, rec.TTL)
		}
	}},
	{name: "retention", routes: []Route{{Pattern: "POST /v1/quotes", Retention: ptr(time.Hour)}}, check: func(c *routeClient) {
		c.send("POST", "/v1/quotes", "q", "{}")
		c.send("POST", "/v1/charges", "c", "{}")
		if rec := c.record("q"); rec.TTL <= 50*time.Minute || rec.TTL > time.Hour {
			c.t.Fatalf("a quote is kept %v; want the route's hour", rec.TTL)
		}
		if rec := c.record("c"); rec.TTL <= 23*time.Hour {
			c.t.Fatalf("a charge is kept %v; want the top level's 24h", rec.TTL)
		}
	}},
	{name: "wait", routes: []Route{{Pattern: "POST /slow/waits", Wait: ptr(time.Minute)}}, check: func(c *routeClient) {
		first, second := make(chan reply, 1), make(chan reply, 1)
		go func() { first <- c.send("POST", "/slow/waits", "w", "{}") }()
		<-c.acquired // the first holds the key
		go func() { second <- c.send("POST", "/slow/waits", "w", "{}") }()
		<-c.acquired // the second found it in flight: without a wait it answers 409 now
		close(c.up.release)
		c.want("the first", <-first, http.StatusCreated, false)
		c.want("the second, which waited", <-second, http.StatusCreated, true)
	}},
	{name: "key-from json", routes: []Route{{Pattern: "POST /v1/orders", KeyFrom: "json:/request_id", RequireKey: ptr(true)}}, check: func(c *routeClient) {
		body := func(id string) string { return `{"request_id":"` + c.key + id + `","amount":1}` }
		c.want("an order keyed by its body", c.send("POST", "/v1/orders", "", body("o1")), http.StatusCreated, false)
		c.want("its retry", c.send("POST", "/v1/orders", "", body("o1")), http.StatusCreated, true)
		c.want("its retry with the same key in the header too", c.send("POST", "/v1/orders", "o1", body("o1")), http.StatusCreated, true)
		if got := c.send("POST", "/v1/orders", "o2", body("o1")); got.status != http.StatusBadRequest || got.code != idemhttp.CodeKeyInvalid {
			c.t.Fatalf("header and field disagreeing = %d %s; want 400 key_invalid", got.status, got.body)
		}
		if got := c.send("POST", "/v1/orders", "", `{"request_id":7}`); got.status != http.StatusBadRequest || got.code != idemhttp.CodeKeyInvalid {
			c.t.Fatalf("a number as the key = %d %s; want 400 key_invalid", got.status, got.body)
		}
		if got := c.send("POST", "/v1/orders", "", `{"amount":1}`); got.status != http.StatusBadRequest || got.code != idemhttp.CodeKeyRequired {
			c.t.Fatalf("no key anywhere = %d %s; want 400 key_required", got.status, got.body)
		}
		c.want("the header alone", c.send("POST", "/v1/orders", "o3", `{"amount":1}`), http.StatusCreated, false)
		if c.runs("o1") != 1 || c.runs("o3") != 1 {
			c.t.Fatalf("runs o1 %d, o3 %d; want 1 each, under the key the upstream got in Idempotency-Key", c.runs("o1"), c.runs("o3"))
		}
	}},
	{name: "fingerprint ignore", routes: []Route{{Pattern: "POST /v1/transfers", Fingerprint: FingerprintRule{Ignore: []string{"/request_id", "/meta/sent_at"}}}}, check: func(c *routeClient) {
		c.want("a transfer", c.send("POST", "/v1/transfers", "t", `{"amount":5,"request_id":"a","meta":{"sent_at":1}}`), http.StatusCreated, false)
		c.want("a retry with new ids", c.send("POST", "/v1/transfers", "t", `{"request_id":"b","amount":5,"meta":{"sent_at":2}}`), http.StatusCreated, true)
		c.want("another amount", c.send("POST", "/v1/transfers", "t", `{"amount":6,"request_id":"c"}`), http.StatusUnprocessableEntity, false)
		c.want("at the top level", c.send("POST", "/v1/charges", "c", `{"amount":5,"request_id":"a"}`), http.StatusCreated, false)
		c.want("a new id there", c.send("POST", "/v1/charges", "c", `{"amount":5,"request_id":"b"}`), http.StatusUnprocessableEntity, false)
	}},
	{name: "fingerprint only", routes: []Route{{Pattern: "POST /v1/payouts", Fingerprint: FingerprintRule{Only: []string{"/amount", "/currency"}}}}, check: func(c *routeClient) {
		c.want("a payout", c.send("POST", "/v1/payouts", "p", `{"amount":5,"currency":"eur","note":"x"}`), http.StatusCreated, false)
		c.want("another note", c.send("POST", "/v1/payouts", "p", `{"currency":"eur","amount":5,"note":"y"}`), http.StatusCreated, true)
		c.want("another currency", c.send("POST", "/v1/payouts", "p", `{"amount":5,"currency":"usd"}`), http.StatusUnprocessableEntity, false)
		c.want("no currency", c.send("POST", "/v1/payouts", "p", `{"amount":5}`), http.StatusUnprocessableEntity, false)
	}},
	{name: "statuses", routes: []Route{{Pattern: "POST /v1/holds/{status}", Statuses: StatusOverrides{
		Store: []string{"503"}, Release: []string{"5xx"}, Unknown: []string{"409"}}}}, check: func(c *routeClient) {
		c.want("a 503, stored", c.send("POST", "/v1/holds/503", "s", "{}"), http.StatusServiceUnavailable, false)
		c.want("its retry", c.send("POST", "/v1/holds/503", "s", "{}"), http.StatusServiceUnavailable, true)
		c.want("a 500, released", c.send("POST", "/v1/holds/500", "r", "{}"), http.StatusInternalServerError, false)
		c.want("its retry, run again", c.send("POST", "/v1/holds/500", "r", "{}"), http.StatusInternalServerError, false)
		c.want("a 409, unknown", c.send("POST", "/v1/holds/409", "u", "{}"), http.StatusConflict, false)
		if got := c.send("POST", "/v1/holds/409", "u", "{}"); got.code != idemhttp.CodeOutcomeUnknown {
			c.t.Fatalf("the 409's retry = %d %s; want 503 outcome_unknown", got.status, got.body)
		}
		c.want("a 500 at the top level, stored", c.send("POST", "/v1/other/500", "t", "{}"), http.StatusInternalServerError, false)
		c.want("its retry", c.send("POST", "/v1/other/500", "t", "{}"), http.StatusInternalServerError, true)
		if c.runs("s") != 1 || c.runs("r") != 2 || c.runs("u") != 1 || c.runs("t") != 1 {
			c.t.Fatalf("runs: stored %d, released %d, unknown %d, top %d; want 1, 2, 1, 1", c.runs("s"), c.runs("r"), c.runs("u"), c.runs("t"))
		}
	}},
	// Issue 31, item 2: deploy/idem.yaml's refunds route. Under the
	// default error format a status no entry names went to a nil base
	// policy: a panic after the upstream ran, nothing stored, the key
	// PROCESSING for the life of the process.
	{name: "statuses: a status no entry names follows the format's policy", routes: []Route{{Pattern: "POST /v1/charges/{id}/refunds",
		Name: "refunds", Statuses: StatusOverrides{Unknown: []string{"409"}}, ReconcileURL: "{upstream}/lookup/refunds/{key}"}},
		check: func(c *routeClient) {
			c.want("a refund", c.send("POST", "/v1/charges/ch_1/refunds", "r", "{}"), http.StatusCreated, false)
			c.want("its retry", c.send("POST", "/v1/charges/ch_1/refunds", "r", "{}"), http.StatusCreated, true)
			c.want("a refund answered 409", c.send("POST", "/v1/charges/ch_2/refunds?status=409", "u", "{}"), http.StatusConflict, false)
			if rec := c.record("u"); rec.State != store.StateUnknown {
				c.t.Fatalf("the 409's key is %v; want UNKNOWN", rec.State)
			}
			c.want("a refund answered 429", c.send("POST", "/v1/charges/ch_3/refunds?status=429", "s", "{}"), http.StatusTooManyRequests, false)
			c.want("its retry, run again (released by the default policy)", c.send("POST", "/v1/charges/ch_3/refunds?status=429", "s", "{}"), http.StatusTooManyRequests, false)
			if c.runs("r") != 1 || c.runs("u") != 1 || c.runs("s") != 2 {
				c.t.Fatalf("runs: stored %d, unknown %d, released %d; want 1, 1, 2", c.runs("r"), c.runs("u"), c.runs("s"))
			}
		}},
	// The gateway's forward is the handler's work itself, sent through
	// idemclient.Transport without a step key: it is no downstream step,
	// and the upstream's own 401, 403 and 429 (it did not process the
	// request) still release the key, on a route as at the top level.
	{name: "statuses: the forward to the upstream is no downstream step", routes: []Route{{Pattern: "POST /v1/charges/{status}", Name: "charges"}},
		check: func(c *routeClient) {
			for _, path := range []string{"/v1/charges/401", "/v1/charges/403", "/v1/charges/429", "/v1/other/429"} {
				key := strings.ReplaceAll(path[len("/v1/"):], "/", "-")
				status, _ := strconv.Atoi(path[len(path)-3:])
				c.want(path, c.send("POST", path, key, "{}"), status, false)
				c.want(path+"'s retry, run again (released)", c.send("POST", path, key, "{}"), status, false)
				if n := c.runs(key); n != 2 {
					c.t.Fatalf("%s ran %d times upstream; want 2", path, n)
				}
			}
		}},
	{name: "statuses: an upstream 503 is UNKNOWN unless a route releases it", routes: shedding, check: checkUpstream503},
	{name: "statuses: an upstream 503 is UNKNOWN unless a route releases it (stripe)", routes: shedding, check: checkUpstream503,
		cfg: func(cfg *Config, _ *routeUpstream) { cfg.ErrorFormat = idemhttp.ErrorFormatStripe }},
	{name: "reconcile-url", cfg: func(cfg *Config, up *routeUpstream) { cfg.ReconcileURL = up.URL + "/lookup/top/{key}" },
		routes: []Route{{Pattern: "POST /v1/charges/{status}", Name: "charges", ReconcileURL: "{upstream}/lookup/charges/{key}"}},
		check: func(c *routeClient) {
			c.want("a charge lost in a gateway timeout", c.send("POST", "/v1/charges/504", "r", "{}"), http.StatusGatewayTimeout, false)
			c.want("at the top level", c.send("POST", "/v1/other/504", "t", "{}"), http.StatusGatewayTimeout, false)
			// Each retry asks its route's lookup, which says "never ran": it runs again.
			c.want("the charge's retry", c.send("POST", "/v1/charges/504", "r", "{}"), http.StatusGatewayTimeout, false)
			c.want("the other's retry", c.send("POST", "/v1/other/504", "t", "{}"), http.StatusGatewayTimeout, false)
			c.up.mu.Lock()
			defer c.up.mu.Unlock()
			want := []string{"/lookup/charges/" + c.key + "r", "/lookup/top/" + c.key + "t"}
			if fmt.Sprint(c.up.lookups) != fmt.Sprint(want) || c.up.runs[c.key+"r"] != 2 {
				c.t.Fatalf("lookups %q, runs %d; want %q and a second run", c.up.lookups, c.up.runs[c.key+"r"], want)
			}
		}},
}

// acquireSpans sends a value on acquired each time the gateway took or
// looked up a key in the store (its idem.acquire span ended), as long as
// there is room: a case that reads them reads them all.
type acquireSpans struct {
	sdktrace.SpanProcessor
	acquired chan struct{}
}

func (a acquireSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() == "idem.acquire" {
		select {
		case a.acquired <- struct{}{}:
		default:
		}
	}
}

// shedding is a route whose upstream sheds load with 503 before any work,
// and says so.
var shedding = []Route{{Pattern: "POST /v1/shed/{status}", Statuses: StatusOverrides{Release: []string{"503"}}}}

// checkUpstream503: a 503 does not prove that nothing ran (an Envoy reset
// after delivery, Heroku's H12, http.TimeoutHandler): the key turns
// UNKNOWN and its retry does not reach the upstream. A route that
// declares its 503 a refusal before any work gets it released.
func checkUpstream503(c *routeClient) {
	c.want("a charge answered 503", c.send("POST", "/v1/charges/503", "u", "{}"), http.StatusServiceUnavailable, false)
	if rec := c.record("u"); rec.State != store.StateUnknown {
		c.t.Fatalf("the 503's key is %v; want UNKNOWN", rec.State)
	}
	if got := c.send("POST", "/v1/charges/503", "u", "{}"); got.code != idemhttp.CodeOutcomeUnknown {
		c.t.Fatalf("the 503's retry = %d %s; want 503 outcome_unknown", got.status, got.body)
	}
	c.want("a 503 from the shedding route", c.send("POST", "/v1/shed/503", "r", "{}"), http.StatusServiceUnavailable, false)
	c.want("its retry, run again (released by the route)", c.send("POST", "/v1/shed/503", "r", "{}"), http.StatusServiceUnavailable, false)
	if c.runs("u") != 1 || c.runs("r") != 2 {
		c.t.Fatalf("runs: unknown %d, released %d; want 1 and 2", c.runs("u"), c.runs("r"))
	}
}

// Every route option, on the memory store and on Redis.
func TestRouteOptions(t *testing.T) {
	for storeName, newStore := range testenv.Stores() {
		for _, rc := range routeCases {
			t.Run(storeName+"/"+rc.name, func(t *testing.T) {
				up := newRouteUpstream(t)
				u, _ := url.Parse(up.URL)
				acquired := make(chan struct{}, 64)
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(acquireSpans{sdktrace.NewSimpleSpanProcessor(nil), acquired}))
				defer tp.Shutdown(context.Background())
				cfg := Config{Upstream: u, Store: newStore(t), AllowAnonymous: true, Logger: slog.New(slog.DiscardHandler), Tracer: tp.Tracer("test")}
				if rc.cfg != nil {
					rc.cfg(&cfg, up)
				}
				for _, rt := range rc.routes {
					rt.ReconcileURL = strings.ReplaceAll(rt.ReconcileURL, "{upstream}", up.URL)
					cfg.Routes = append(cfg.Routes, rt)
				}
				g, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(g.Handler())
				defer srv.Close()
				rc.check(&routeClient{t: t, up: up, g: g, srv: srv, key: testenv.Prefix(t), acquired: acquired})
			})
		}
	}
}

// Issue 31, item 11: a route sets its upstream timeout. deploy/idem.yaml's
// 5-minute export was cut at the top level's 30 s, answered 504 and
// turned UNKNOWN. In a bubble, against an upstream that never answers,
// each call is cut at its own route's timeout, a pass-through route's too.
func TestRouteUpstreamTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			<-r.Context().Done()
			return nil, context.Cause(r.Context())
		})
		g := newTestGateway(t, Config{Upstream: mustURL(t, "http://upstream.test"), AllowAnonymous: true, Transport: hang, Routes: []Route{
			{Pattern: "POST /v1/exports", Lease: ptr(5 * time.Minute), UpstreamTimeout: ptr(5 * time.Minute)},
			{Pattern: "POST /v1/search", PassThrough: true, UpstreamTimeout: ptr(time.Minute)},
		}})
		for _, c := range []struct {
			path, key string
			want      time.Duration
		}{{"/v1/exports", "e", 5 * time.Minute}, {"/v1/charges", "c", 30 * time.Second}, {"/v1/search", "", time.Minute}} {
			req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader("{}"))
			if c.key != "" {
				req.Header.Set(idemhttp.HeaderKey, c.key)
			}
			rec := httptest.NewRecorder()
			start := time.Now()
			g.Handler().ServeHTTP(rec, req)
			if took := time.Since(start); rec.Code != http.StatusGatewayTimeout || took != c.want || !strings.Contains(rec.Body.String(), c.want.String()) {
				t.Errorf("%s: %d after %v (%s); want 504 after %v, saying so", c.path, rec.Code, took, rec.Body, c.want)
			}
		}
	})
}

// The lease a key keeps after its gateway died must cover the upstream
// call, whose timeout the gateway would have waited out: a route that
// says otherwise is refused (TestRouteErrorsNameTheField); the top level's
// flags, which running deployments set, are warned about.
func TestLeaseShorterThanTheUpstreamTimeout(t *testing.T) {
	var logs syncBuffer
	g := newTestGateway(t, Config{Upstream: mustURL(t, "http://upstream.test"), UpstreamTimeout: time.Minute, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Routes: []Route{{Pattern: "/a", PassThrough: true, UpstreamTimeout: ptr(time.Hour)}}})
	if g == nil {
		t.Fatal("no gateway")
	}
	lines := logs.lines(t, "idem: --upstream-timeout is longer than --lease")
	if len(lines) != 1 || lines[0]["upstream_timeout"] != "1m0s" || lines[0]["lease"] != "30s" {
		t.Errorf("--upstream-timeout 1m with the default lease: log lines %v; want one warning naming both", lines)
	}
}

// Under --takeover run, the retry after the lease sends the request
// again: a lease shorter than the upstream timeout would let it while
// the upstream may still be running it, so the start is refused.
func TestTakeoverRunNeedsTheLeaseToCoverTheUpstreamTimeout(t *testing.T) {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Upstream: mustURL(t, "http://upstream.test"), Store: s, Admin: testAdmin, Logger: slog.New(slog.DiscardHandler),
		Takeover: idem.TakeoverRun, Lease: time.Second, UpstreamTimeout: 2 * time.Second}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "--upstream-timeout 2s is longer than --lease 1s") {
		t.Fatalf("New = %v; want the start refused, naming both", err)
	}
	cfg.UpstreamTimeout = time.Second
	newTestGateway(t, cfg)
}

// sendAs is send with the Host (when not empty) and the path as written.
func (c *routeClient) sendAs(method, host, path, key, body string, hdr ...string) reply {
	c.t.Helper()
	req, err := http.NewRequest(method, c.srv.URL+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(idemhttp.HeaderKey, c.key+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.srv.Client().Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, replayed: resp.Header.Get(idemhttp.HeaderReplayed) == "true", body: string(b)}
	if i := strings.Index(r.body, `"code":"`); i >= 0 {
		r.code, _, _ = strings.Cut(r.body[i+8:], `"`)
	}
	return r
}

// spellingRoutes are the routes of TestSpellingsOfAPathMeetTheirRoute.
var spellingRoutes = []Route{
	{Pattern: "POST /v1/orders", KeyFrom: "json:/request_id"},
	{Pattern: "POST /v1/search", PassThrough: true},
	{Pattern: "POST /v1/items/{id}", RequireKey: ptr(true)},
	{Pattern: "POST /v1/items/{id}/{op}", KeyFrom: "json:/request_id"},
	{Pattern: "POST /v1/batches/", KeyFrom: "json:/request_id"},
}

// Issue 31, item 3: with POST /v1/orders keyed by json:/request_id, the
// same order sent to /v1/orders/, /V1/orders, /v1/Orders, /v1/orders;v=1,
// /v1/orders%20 or /v1/orders. fell to the top level (keyed by the header
// alone, which it lacked) and ran again each time; "post" was forwarded
// unprotected; a host pattern missed API.EXAMPLE.COM and a trailing dot
// (and any other Host: such patterns are refused now,
// TestHostPatternsAreRefused).
// Now every spelling a common framework could route to the orders
// endpoint gets the orders route: the order runs once (another spelling is
// another request to the fingerprint: 422, never a run); the method in
// lower case, and what cannot be matched safely, get 400.
func TestSpellingsOfAPathMeetTheirRoute(t *testing.T) {
	for storeName, newStore := range testenv.Stores() {
		t.Run(storeName, func(t *testing.T) {
			up := newRouteUpstream(t)
			g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), Store: newStore(t), AllowAnonymous: true, Routes: spellingRoutes})
			srv := httptest.NewServer(g.Handler())
			defer srv.Close()
			c := &routeClient{t: t, up: up, g: g, srv: srv, key: testenv.Prefix(t)}
			order := `{"request_id":"` + c.key + `o1","amount":1}`
			c.want("the order", c.sendAs("POST", "", "/v1/orders", "", order), http.StatusCreated, false)
			for _, path := range []string{"/v1/orders", "/v1/orders/", "/V1/orders", "/v1/Orders", "/v1/orders;v=1", "/v1/orders%20",
				"/v1/orders.", "/v1//orders", "/v1/%6Frders", "/V1/ORDERS/;x=1/"} {
				got := c.sendAs("POST", "", path, "", order)
				if !(got.status == http.StatusCreated && got.replayed) && !(got.status == http.StatusUnprocessableEntity && got.code == idemhttp.CodeKeyMismatch) {
					t.Errorf("the order sent to %s = %d %s; want its replay or 422 key_mismatch (another spelling is another request)", path, got.status, got.body)
				}
			}
			if got := c.sendAs("post", "", "/v1/orders", "", order); got.status != http.StatusBadRequest || got.code != CodeAmbiguousRequest {
				t.Errorf(`"post" = %d %s; want 400 %s`, got.status, got.body, CodeAmbiguousRequest)
			}
			if n := c.runs("o1"); n != 1 {
				t.Fatalf("the order ran %d times; want once", n)
			}

			// A subtree's root without its slash (ServeMux would redirect it).
			batch := `{"request_id":"` + c.key + `b1"}`
			for i := range 2 {
				c.want("a batch to /v1/batches", c.sendAs("POST", "", "/v1/batches", "", batch), http.StatusCreated, i == 1)
			}
			// A pass-through route does not take in what the top level
			// protects: /v1/Search may be another endpoint than /v1/search.
			for i := range 2 {
				c.want("a keyed POST to /v1/Search", c.sendAs("POST", "", "/v1/Search", "s", "{}"), http.StatusCreated, i == 1)
			}
			// Two readings of %2F, two protected routes: which policy?
			if got := c.sendAs("POST", "", "/v1/items/a%2Fb", "i", order); got.status != http.StatusBadRequest || got.code != CodeAmbiguousRequest {
				t.Errorf("/v1/items/a%%2Fb = %d %s; want 400 %s", got.status, got.body, CodeAmbiguousRequest)
			}
			// A dot segment, where some route protects the method.
			if got := c.sendAs("POST", "", "/v1/x/../orders", "", order); got.status != http.StatusBadRequest || got.code != CodeAmbiguousRequest {
				t.Errorf("/v1/x/../orders = %d %s; want 400 %s", got.status, got.body, CodeAmbiguousRequest)
			}
			c.want("a GET with a dot segment (nothing protects a GET)", c.sendAs("GET", "", "/v1/x/../orders", "", ""), http.StatusCreated, false)
			if n := c.runs("o1") + c.runs("i"); n != 1 {
				t.Fatalf("refused requests reached the upstream: %d runs; want the first order's only", n)
			}
		})
	}
}

// A pattern that names a host cannot be honoured: the gateway forwards
// every request to its one upstream with the upstream's own Host, so the
// client's Host selects no endpoint. With POST api.example.com/v2/orders
// keyed by json:/request_id, the order sent with Host
// api-internal.example.com or 10.0.0.7 fell to the top level and ran
// again. Such a pattern is refused at start, naming the pattern without
// its host, and by a reload, which keeps the running routes.
func TestHostPatternsAreRefused(t *testing.T) {
	up := newRouteUpstream(t)
	store, _ := memstore.New(nil)
	for pattern, without := range map[string]string{
		"POST api.example.com/v2/orders": "POST /v2/orders",
		"post\t10.0.0.7/v2/orders/{id}":  "post /v2/orders/{id}",
		"api.example.com:8443/":          "/",
		"[::1]/v2/{rest...}":             "/v2/{rest...}",
	} {
		routes := []Route{{Pattern: "POST /v1/orders"}, {Pattern: pattern, KeyFrom: "json:/request_id"}}
		_, err := New(Config{Upstream: mustURL(t, up.URL), Store: store, Routes: routes, Logger: slog.New(slog.DiscardHandler)})
		fe, ok := errors.AsType[*FieldError](err)
		if !ok || fe.Path != "routes[1].match" || !strings.Contains(fe.Err.Error(), "upstream's own Host") ||
			!strings.HasSuffix(fe.Err.Error(), fmt.Sprintf("write the pattern without the host: %q", without)) {
			t.Errorf("the route %q: %v; want a FieldError about routes[1].match saying why and to write %q", pattern, err, without)
		}
	}

	g, c := reloadGateway(t, up, Config{Routes: []Route{{Pattern: "POST /v2/orders", KeyFrom: "json:/request_id"}}})
	c.key = "host-"
	hosted := Config{Upstream: mustURL(t, up.URL), Routes: []Route{{Pattern: "POST api.example.com/v2/orders", KeyFrom: "json:/request_id"}}}
	if err := g.Reload(func() (Config, error) { return hosted, nil }); err == nil || !strings.Contains(err.Error(), "routes[0].match") {
		t.Fatalf("a reload to a host pattern = %v; want it refused, naming routes[0].match", err)
	}
	order := `{"request_id":"host-o1"}`
	for i, host := range []string{"api.example.com", "api-internal.example.com", "10.0.0.7"} {
		c.want("the order to "+host, c.sendAs("POST", host, "/v2/orders", "", order), http.StatusCreated, i > 0)
	}
	if n := c.runs("o1"); n != 1 {
		t.Fatalf("the order ran %d times; want once (the running route, for every Host)", n)
	}
}

// Two routes that are one pattern once compared as requests are refuse
// the configuration, naming both; the top level's methods are matched
// without case too; a request target that is not a path (an HTTP/2
// preface, "PRI * HTTP/2.0") is not forwarded, routes or not.
func TestSpellingsOfTheConfiguration(t *testing.T) {
	store, _ := memstore.New(nil)
	_, err := New(Config{Upstream: mustURL(t, "http://upstream.test"), Store: store, Logger: slog.New(slog.DiscardHandler),
		Routes: []Route{{Pattern: "POST /v1/orders"}, {Pattern: "post /V1/Orders."}}})
	if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Path != "routes[1].match" || !strings.Contains(fe.Err.Error(), `conflicts with routes[0] "POST /v1/orders" once both are compared as requests are`) {
		t.Errorf("two spellings of one route: %v; want a FieldError about routes[1].match naming routes[0]", err)
	}
	up := newRouteUpstream(t)
	g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), AllowAnonymous: true, Methods: []string{"put"}})
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	c := &routeClient{t: t, up: up, g: g, srv: srv, key: "methods-"}
	c.want("a PUT under --methods put", c.sendAs("PUT", "", "/v1/items/1", "p", "{}"), http.StatusCreated, false)
	c.want("its retry", c.sendAs("PUT", "", "/v1/items/1", "p", "{}"), http.StatusCreated, true)
	for _, method := range []string{"put", "Put"} {
		if got := c.sendAs(method, "", "/v1/items/1", "p", "{}"); got.status != http.StatusBadRequest || got.code != CodeAmbiguousRequest {
			t.Errorf("%q without routes = %d %s; want 400 %s", method, got.status, got.body, CodeAmbiguousRequest)
		}
	}
	req := httptest.NewRequest("PRI", "*", nil)
	req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0
	rec := httptest.NewRecorder()
	g.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), CodeAmbiguousRequest) {
		t.Errorf("PRI * HTTP/2.0 = %d %s; want 400 %s", rec.Code, rec.Body, CodeAmbiguousRequest)
	}
	if n := c.runs("p"); n != 1 {
		t.Fatalf("the PUT ran %d times; want once", n)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if n := len(up.bodies); n != 1 {
		t.Fatalf("the upstream got %d requests; want the first PUT's only", n)
	}
}

// An audit: Rails routes post "v1/charges" as /v1/charges(.:format), so
// /v1/charges.json reaches the charges endpoint, but the gateway matched
// it as another path: a keyless charge passed a require-key route, and
// under top-level methods [PATCH] a keyed payment or batch sent to
// /v1/payments.json or /v1/batches.json ran twice. The path without its
// format suffix is another reading of it: the protecting one wins, two
// protecting routes are ambiguous, and a dot a wildcard takes in stays
// the route's when no other reading differs.
func TestFormatSuffixMeetsItsRoute(t *testing.T) {
	for storeName, newStore := range testenv.Stores() {
		t.Run(storeName, func(t *testing.T) {
			up := newRouteUpstream(t)
			g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), Store: newStore(t), AllowAnonymous: true, Methods: []string{"PATCH"}, Routes: []Route{
				{Pattern: "POST /v1/charges", Methods: []string{"POST"}, RequireKey: ptr(true)},
				{Pattern: "POST /v1/payments", Methods: []string{"POST"}, RequireKey: ptr(true)},
				{Pattern: "POST /v1/batches/", Methods: []string{"POST"}},
				{Pattern: "POST /v1/files/{id}", Methods: []string{"POST"}},
				{Pattern: "POST /v1/exports/{id}", Methods: []string{"POST"}},
				{Pattern: "POST /v1/exports/latest", Methods: []string{"POST"}, KeyFrom: "json:/request_id"},
			}})
			srv := httptest.NewServer(g.Handler())
			defer srv.Close()
			c := &routeClient{t: t, up: up, g: g, srv: srv, key: testenv.Prefix(t)}
			for _, path := range []string{"/v1/charges.json", "/v1/charges.XML", "/v1/Charges.json/", "/v1/charges.json;v=1", "/v1/charges.html."} {
				if got := c.send("POST", path, "", "{}"); got.status != http.StatusBadRequest || got.code != idemhttp.CodeKeyRequired {
					t.Errorf("a keyless charge to %s = %d %s; want 400 %s", path, got.status, got.body, idemhttp.CodeKeyRequired)
				}
			}
			for _, p := range []struct{ path, key string }{{"/v1/payments.json", "p"}, {"/v1/batches.json", "b"}, {"/v1/files/report.pdf", "f"}} {
				for i := range 2 {
					c.want("POST "+p.path, c.send("POST", p.path, p.key, "{}"), http.StatusCreated, i == 1)
				}
				if n := c.runs(p.key); n != 1 {
					t.Errorf("POST %s ran %d times; want once", p.path, n)
				}
			}
			// /v1/exports/latest.csv is {id} as written and latest without
			// its suffix: two protecting routes, which policy?
			if got := c.send("POST", "/v1/exports/latest.csv", "e", "{}"); got.status != http.StatusBadRequest || got.code != CodeAmbiguousRequest {
				t.Errorf("/v1/exports/latest.csv = %d %s; want 400 %s", got.status, got.body, CodeAmbiguousRequest)
			}
			c.want("/v1/exports/e1.csv, one route under both readings", c.send("POST", "/v1/exports/e1.csv", "e1", "{}"), http.StatusCreated, false)
			c.want("a POST no route takes, with a suffix (the top level protects PATCH only)", c.send("POST", "/v1/other.json", "", "{}"), http.StatusCreated, false)
			if n := c.runs("e"); n != 0 {
				t.Errorf("the ambiguous export ran %d times; want never", n)
			}
		})
	}
}

// An audit: with the route POST /v1/orders (key in the body, a key
// required), POST /v1/orders.x-y with a key ran the upstream twice and a
// keyless one passed: only a suffix of letters and digits was a format,
// but Rails' (.:format) takes any characters but '.', '/' and '?', and
// Spring's suffix matching "/v1/orders.*" takes /v1/orders.json.json
// too. Every dot may now begin a format, one more than a route's name
// holds.
func TestAnyFormatSuffixMeetsItsRoute(t *testing.T) {
	up := newRouteUpstream(t)
	g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), AllowAnonymous: true, Routes: []Route{
		{Pattern: "POST /v1/orders", KeyFrom: "json:/request_id", RequireKey: ptr(true)},
		{Pattern: "POST /v1/report.v2", RequireKey: ptr(true)},
	}})
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	c := &routeClient{t: t, up: up, g: g, srv: srv, key: "suffix-"}
	paths := []string{"/v1/orders.x-y", "/v1/orders.v1_0", "/v1/orders.x~1", "/v1/orders.json.json", "/v1/orders.csv",
		"/v1/orders.JSON.x-y", "/v1/orders.a%20b", "/v1/orders.%C3%A9"}
	for i, path := range paths {
		body := fmt.Sprintf(`{"request_id":"suffix-r%d"}`, i)
		for n := range 2 {
			c.want("POST "+path+" "+body, c.send("POST", path, "", body), http.StatusCreated, n == 1)
		}
		if got := c.send("POST", path, "", "{}"); got.status != http.StatusBadRequest || got.code != idemhttp.CodeKeyRequired {
			t.Errorf("a keyless POST %s = %d %s; want 400 %s", path, got.status, got.body, idemhttp.CodeKeyRequired)
		}
	}
	// A route whose name has a dot: its format suffixes are after it.
	for _, path := range []string{"/v1/report.v2.x-y", "/v1/report.v2.json.json"} {
		if got := c.send("POST", path, "", "{}"); got.status != http.StatusBadRequest || got.code != idemhttp.CodeKeyRequired {
			t.Errorf("a keyless POST %s = %d %s; want 400 %s", path, got.status, got.body, idemhttp.CodeKeyRequired)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for i, path := range paths {
		body := fmt.Sprintf(`{"request_id":"suffix-r%d"}`, i)
		if n := strings.Count(strings.Join(up.bodies, "\n"), body); n != 1 {
			t.Errorf("POST %s %s ran %d times; want once", path, body, n)
		}
	}
	if n := len(up.bodies); n != len(paths) {
		t.Errorf("the upstream got %d requests; want %d, one per spelling", n, len(paths))
	}
}

// The serving line says what becomes of a protected request without a
// key, with the routes that forward one unprotected.
func TestKeylessRequests(t *testing.T) {
	no, yes := false, true
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "forwarded unprotected (require-key is off; a route may turn it on)"},
		{Config{RequireKey: true}, "refused (400 key_required)"},
		{Config{RequireKey: true, Routes: []Route{{Pattern: "POST /a", RequireKey: &yes}, {Pattern: "/b", PassThrough: true, RequireKey: &no}}},
			"refused (400 key_required)"},
		{Config{RequireKey: true, Routes: []Route{{Name: "quotes", Pattern: "POST /q", RequireKey: &no}, {Pattern: "POST /w", RequireKey: &no}}},
			"refused (400 key_required), except forwarded unprotected on the routes quotes, POST /w"},
	} {
		if got := keylessRequests(c.cfg); got != c.want {
			t.Errorf("keylessRequests(%+v) = %q; want %q", c.cfg, got, c.want)
		}
	}
}

// A HEAD runs the GET endpoint (ServeMux, Rails, Express, Spring, Django):
// it is protected wherever GET is, on the GET's route. An audit found a
// keyed HEAD to a protected "GET /v1/exports/run" forwarded each time it
// was sent, a keyless one forwarded despite require-key, and, with
// --methods GET,POST and no routes, a keyed HEAD /x run twice. A HEAD is
// fingerprinted as a HEAD: reusing a GET's key, it is a mismatch (422),
// neither a run nor a replay of the GET's body.
func TestHeadIsProtectedWhereGetIs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		path    string
		keyless int // the status of a HEAD without a key
		runs    int // the upstream runs of that HEAD
	}{
		{"route", Config{Routes: []Route{{Pattern: "GET /v1/exports/run", Methods: []string{"GET"}, RequireKey: ptr(true)}}}, "/v1/exports/run", http.StatusBadRequest, 0},
		{"top level", Config{Methods: []string{"GET", "POST"}}, "/x", http.StatusCreated, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newRouteUpstream(t)
			_, c := reloadGateway(t, up, tc.cfg)
			c.want("a keyed GET", c.send("GET", tc.path, "h1", ""), http.StatusCreated, false)
			c.want("its retry", c.send("GET", tc.path, "h1", ""), http.StatusCreated, true)
			c.want("a keyed HEAD", c.send("HEAD", tc.path, "h2", ""), http.StatusCreated, false)
			c.want("its retry", c.send("HEAD", tc.path, "h2", ""), http.StatusCreated, true)
			c.want("a HEAD with the GET's key", c.send("HEAD", tc.path, "h1", ""), http.StatusUnprocessableEntity, false)
			c.want("a HEAD without a key", c.send("HEAD", tc.path, "", ""), tc.keyless, false)
			if c.runs("h1") != 1 || c.runs("h2") != 1 {
				t.Errorf("runs: GET key %d, HEAD key %d; want 1 and 1", c.runs("h1"), c.runs("h2"))
			}
			if up.count("") != tc.runs {
				t.Errorf("the keyless HEAD ran %d times upstream; want %d", up.count(""), tc.runs)
			}
		})
	}
}
