package check

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/faultproxy"
	"github.com/idemkit/idem/internal/httpwire"
)

// The product check: two `idem serve` processes on one Redis, each run on
// a configuration FILE drawn from its seed (store given only there),
// driven as a product is: several tenants sharing keys, every spelling of
// a route's path, keys sent twice, keyless requests, statuses the route's
// policy stores, releases or leaves unknown, operators on the admin API
// with and without the token and from a foreign origin, gateways killed
// mid-request. The oracle is the configuration the harness drew, with the
// precedence it documents (an IDEM_ variable over the file), never what
// the binary says it runs.

// productRoute is one route of a drawn configuration, as the oracle reads it.
type productRoute struct {
	name                    string // orders, payments, search
	pattern                 string
	ns                      string // the prefix of its keys
	passThrough             bool
	requireKey              *bool
	retention               time.Duration // 0: the top level's
	lease                   time.Duration // 0: the top level's (with its upstream timeout)
	wait                    time.Duration
	ignoreNote              bool // fingerprint: ignore [/note]
	store, release, unknown []string
}

// productConfig is one run's configuration.
type productConfig struct {
	storeURL, upstream      string
	tenantFrom              string // header (X-Tenant-ID), authorization, or both
	methods                 string // the top level's: never POST, so a POST no route takes passes through unprotected
	requireKey              bool   // the file's require-key
	envRequireKey           string // IDEM_REQUIRE_KEY ("": unset), the file's opposite: it wins over the file
	retention, keyRetention time.Duration
	adminToken              string // "" : none (the admin API is on loopback)
	lease                   time.Duration
	routes                  []productRoute
}

const productLease = 400 * time.Millisecond

func drawProductConfig(seed uint64, storeURL, upstream string) *productConfig {
	rng := rand.New(rand.NewPCG(seed, 77))
	c := &productConfig{storeURL: storeURL, upstream: upstream, tenantFrom: []string{"header", "header", "both", "both", "authorization"}[rng.IntN(5)],
		methods: []string{"[PATCH]", "[PUT]", "[PUT, PATCH]"}[rng.IntN(3)], requireKey: rng.IntN(2) == 0,
		retention: time.Duration(1+rng.IntN(2)) * time.Second, lease: productLease}
	if rng.IntN(4) > 0 {
		c.envRequireKey = strconv.FormatBool(!c.requireKey)
	}
	if rng.IntN(10) > 0 {
		c.keyRetention = c.retention + 4*time.Second
	}
	if rng.IntN(2) == 0 {
		c.adminToken = fmt.Sprintf("admin-%d", seed)
	}
	orders := productRoute{name: "orders", pattern: "POST /v1/orders", ns: "o", ignoreNote: rng.IntN(2) == 0}
	if rng.IntN(2) == 0 {
		orders.lease = []time.Duration{300 * time.Millisecond, 600 * time.Millisecond}[rng.IntN(2)]
	}
	if rng.IntN(2) == 0 {
		orders.wait = 200 * time.Millisecond
	}
	switch rng.IntN(3) {
	case 1:
		orders.store, orders.release = []string{"409"}, []string{"5xx"}
	case 2:
		orders.release, orders.unknown = []string{"409"}, []string{"500"}
	}
	if rng.IntN(3) == 0 {
		orders.retention = time.Second
	}
	payments := productRoute{name: "payments", pattern: "POST /v1/payments/{id}", ns: "p"}
	if rng.IntN(2) == 0 {
		t := rng.IntN(2) == 0
		payments.requireKey = &t
	}
	if rng.IntN(2) == 0 {
		payments.store = []string{"500"}
	}
	search := productRoute{name: "search", pattern: "POST /v1/search", ns: "s", passThrough: true}
	c.routes = []productRoute{orders, payments, search}
	return c
}

// file is the config file of c.
func (c *productConfig) file() string {
	var b strings.Builder
	fmt.Fprintf(&b, "store: %s\nupstream: %s\nlog-level: error\nstore-timeout: 1s\n", c.storeURL, c.upstream)
	fmt.Fprintf(&b, "lease: %v\nupstream-timeout: %v\nmethods: %s\nrequire-key: %t\n", c.lease, c.lease, c.methods, c.requireKey)
	fmt.Fprintf(&b, "retention: %v\nkey-retention: %v\n", c.retention, c.keyRetention)
	switch c.tenantFrom {
	case "header":
		b.WriteString("tenant-from: [\"header:X-Tenant-ID\"]\n")
	case "both":
		b.WriteString("tenant-from: [authorization, \"header:X-Tenant-ID\"]\n")
	default:
		b.WriteString("tenant-from: [authorization]\n")
	}
	if c.adminToken != "" {
		fmt.Fprintf(&b, "admin-token: %s\n", c.adminToken)
	}
	b.WriteString("routes:\n")
	for _, rt := range c.routes {
		fmt.Fprintf(&b, "  - match: %s\n    name: %s\n", rt.pattern, rt.name)
		if rt.passThrough {
			b.WriteString("    pass-through: true\n")
			continue
		}
		b.WriteString("    methods: [POST]\n")
		if rt.requireKey != nil {
			fmt.Fprintf(&b, "    require-key: %t\n", *rt.requireKey)
		}
		if rt.lease != 0 {
			fmt.Fprintf(&b, "    lease: %v\n    upstream-timeout: %v\n", rt.lease, rt.lease)
		}
		if rt.retention != 0 {
			fmt.Fprintf(&b, "    retention: %v\n", rt.retention)
		}
		if rt.wait != 0 {
			fmt.Fprintf(&b, "    wait: %v\n", rt.wait)
		}
		if rt.ignoreNote {
			b.WriteString("    fingerprint:\n      ignore: [/note]\n")
		}
		if rt.store != nil || rt.release != nil || rt.unknown != nil {
			b.WriteString("    statuses:\n")
			for _, l := range []struct {
				name string
				v    []string
			}{{"store", rt.store}, {"release", rt.release}, {"unknown", rt.unknown}} {
				if l.v != nil {
					fmt.Fprintf(&b, "      %s: [\"%s\"]\n", l.name, strings.Join(l.v, `", "`))
				}
			}
		}
	}
	return b.String()
}

// env is the IDEM_ variables of the run's gateways.
func (c *productConfig) env() []string {
	if c.envRequireKey != "" {
		return []string{"IDEM_REQUIRE_KEY=" + c.envRequireKey}
	}
	return nil
}

func (c *productConfig) text() string {
	return fmt.Sprintf("# environment: %s\n# command line: idem serve --listen ADDR --admin ADDR --config FILE\n%s",
		strings.Join(c.env(), " "), c.file())
}

func (c *productConfig) route(name string) *productRoute {
	for i := range c.routes {
		if c.routes[i].name == name {
			return &c.routes[i]
		}
	}
	return nil
}

// requires says whether rt refuses a request without a key: its own
// require-key, else the top level's, where IDEM_REQUIRE_KEY wins over the file.
func (c *productConfig) requires(rt *productRoute) bool {
	if rt.requireKey != nil {
		return *rt.requireKey
	}
	if c.envRequireKey != "" {
		return c.envRequireKey == "true"
	}
	return c.requireKey
}

// life is how long a key of rt is kept from its completion: the longer of
// its retention and the key retention.
func (c *productConfig) life(rt *productRoute) time.Duration {
	ret := c.retention
	if rt.retention != 0 {
		ret = rt.retention
	}
	return max(ret, c.keyRetention)
}

// disposition is what rt's policy does with an upstream status: a status
// of the route's lists, then its class, then the default policy
// (docs/problems.md), written out here so that the oracle is not the code.
func (rt *productRoute) disposition(status int) string {
	code, class := strconv.Itoa(status), strconv.Itoa(status/100)+"xx"
	for _, entry := range []string{code, class} {
		for _, l := range []struct {
			d string
			v []string
		}{{"store", rt.store}, {"release", rt.release}, {"unknown", rt.unknown}} {
			if slices.Contains(l.v, entry) {
				return l.d
			}
		}
	}
	switch status {
	case 408, 425, 429, 503, 401, 403, 407, 411, 413, 414, 415, 431:
		return "release"
	case 502, 504:
		return "unknown"
	}
	return "store"
}

// spellings are paths that a common upstream framework routes to the
// endpoint of path (/v1/orders, /v1/payments/ID): the gateway must
// protect each as the route, or refuse it (400 ambiguous_request).
func spellings(path string) []string {
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	join := func(f func(i int, seg string) string) string {
		out := make([]string, len(segs))
		for i, seg := range segs {
			out[i] = f(i, seg)
		}
		return "/" + strings.Join(out, "/")
	}
	out := []string{strings.ToUpper(path), path + "/", path + ";v=1", path + ".", "/" + path, path + "%2F"}
	for i := range segs {
		at := func(f func(string) string) string {
			return join(func(j int, seg string) string {
				if j == i {
					return f(seg)
				}
				return seg
			})
		}
		out = append(out,
			at(strings.ToUpper),
			at(func(s string) string { return strings.ToUpper(s[:1]) + s[1:] }),
			at(func(s string) string { return s + ";x=y" }),
			at(func(s string) string { return fmt.Sprintf("%%%02X", s[0]) + s[1:] }),
			at(func(s string) string { return s[:len(s)-1] + fmt.Sprintf("%%%02x", s[len(s)-1]) }),
		)
		if i+1 < len(segs) {
			out = append(out, at(func(s string) string { return s + "/" }))
		}
	}
	return out
}

// productEnv: the product check's two gateways, their Redis and upstream.
type productEnv struct {
	t       *testing.T
	gs      []*gatewayProc
	file    string
	redis   string
	up      *productUpstream
	cfg     *productConfig
	seed    uint64
	tenants []string
	keys    map[string][]string // namespace → keys
	rec     *Recorder
	ledger  *Ledger
	hc      *http.Client

	mu    sync.Mutex
	count map[string]int // what the run did, for its log line: that each part of the workload ran
}

// did counts one thing the run did.
func (pe *productEnv) did(what string) {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	pe.count[what]++
}

func productEnvSetup(t *testing.T) *Env {
	bin := buildIdem(t)
	s, p := privateRedis(t, "redis", "--appendonly", "yes", "--appendfsync", "always")
	pe := &productEnv{t: t, file: filepath.Join(t.TempDir(), "idem.yaml"), redis: "redis://" + p.Addr(),
		up: &productUpstream{}, hc: &http.Client{Timeout: 5 * time.Second}}
	pe.up.env = pe
	srv := &http.Server{Addr: freeAddr(t), Handler: pe.up, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	pe.up.addr = srv.Addr
	for range 2 {
		g := &gatewayProc{bin: bin, listen: freeAddr(t), admin: freeAddr(t), args: []string{"--config", pe.file}}
		t.Cleanup(g.Kill)
		pe.gs = append(pe.gs, g)
	}
	return &Env{
		Prepare: pe.prepare,
		Clients: func(ctx context.Context, w Workload, seed uint64, rec *Recorder, l *Ledger, _ string, _ []string) {
			pe.run(ctx, w, rec, l)
		},
		Finish: pe.finish,
		Life:   pe.lives,
		Nemeses: []Nemesis{GatewayKill{G: pe.gs[0]}, GatewayKill{G: pe.gs[1]}, Pause{What: "redis", P: s},
			Net{What: "redis", Proxy: p, Mode: faultproxy.DropEverySecond}},
	}
}

// buildIdem builds cmd/idem into the test's directory.
func buildIdem(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "idem")
	build := exec.Command("go", "build", "-o", bin, "./cmd/idem")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/idem: %v\n%s", err, out)
	}
	return bin
}

// prepare draws the run's configuration, writes it, and starts both
// gateways on it.
func (pe *productEnv) prepare(ctx context.Context, seed uint64) (string, error) {
	pe.seed = seed
	pe.count = map[string]int{}
	pe.cfg = drawProductConfig(seed, pe.redis, "http://"+pe.up.addr)
	pe.tenants = nil
	for i := range 3 {
		pe.tenants = append(pe.tenants, fmt.Sprintf("t%s%c", strconv.FormatUint(seed, 36), 'a'+i))
	}
	pe.keys = map[string][]string{}
	for _, ns := range []string{"o", "q", "p", "z"} {
		n := 8
		if ns == "z" {
			n = 8
		}
		for i := range n {
			pe.keys[ns] = append(pe.keys[ns], fmt.Sprintf("r%s-%s%d", strconv.FormatUint(seed, 36), ns, i))
		}
	}
	if err := os.WriteFile(pe.file, []byte(pe.cfg.file()), 0o644); err != nil {
		return "", err
	}
	for _, g := range pe.gs {
		g.Kill()
		g.env = pe.cfg.env()
		if err := g.start(ctx); err != nil {
			return pe.cfg.text(), fmt.Errorf("%w\nthe configuration:\n%s", err, pe.cfg.text())
		}
	}
	return pe.cfg.text(), nil
}

// id is the history's name of a tenant's key.
func id(tenant, key string) string { return tenant + "/" + key }

// routeOfKey is the route of a key, by its namespace.
func (pe *productEnv) routeOfKey(key string) *productRoute {
	i := strings.LastIndexByte(key, '-')
	switch key[i+1] {
	case 'p':
		return pe.cfg.route("payments")
	}
	return pe.cfg.route("orders")
}

func (pe *productEnv) lives() map[string]int64 {
	out := map[string]int64{}
	for _, tenant := range pe.tenants {
		for _, keys := range pe.keys {
			for _, k := range keys {
				out[id(tenant, k)] = int64(pe.cfg.life(pe.routeOfKey(k)))
			}
		}
	}
	return out
}

// productUpstream is the API behind the gateways. A request of a
// protected route applies an effect on the ledger under the fence the
// gateway sends; one that arrives without a fence though the oracle says
// its route protects it is an escape.
type productUpstream struct {
	env     *productEnv
	addr    string
	slowNow atomic.Int64 // slow requests in flight
}

func (u *productUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pe := u.env
	route, key := r.Header.Get("X-Check-Route"), r.Header.Get("X-Check-Key")
	cfg, rec, l := pe.cfg, pe.rec, pe.ledger
	rt := cfg.route(route)
	if rt == nil || rec == nil || rt.passThrough {
		io.WriteString(w, "passed")
		return
	}
	fenceHdr := r.Header.Get("Idempotency-Fence")
	if fenceHdr == "" {
		switch {
		case r.Header.Get("X-Check-Keyed") == "1":
			rec.saw(Violation{"escape", key, fmt.Sprintf("%s %s with a key reached the upstream unprotected (no Idempotency-Fence); route %s protects it",
				r.Method, r.RequestURI, route)})
		case cfg.requires(rt):
			rec.saw(Violation{"require-key", key, fmt.Sprintf("%s %s without a key reached the upstream; route %s requires one", r.Method, r.RequestURI, route)})
		}
		io.WriteString(w, "unprotected")
		return
	}
	fence, _ := strconv.ParseInt(fenceHdr, 10, 64)
	if s := r.Header.Get("X-Check-Status"); s != "" {
		code, _ := strconv.Atoi(s)
		w.WriteHeader(code) // refused: nothing ran
		io.WriteString(w, "status "+s)
		return
	}
	time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	began, _ := strconv.ParseInt(r.Header.Get("X-Check-Began"), 10, 64)
	v, err := l.Apply(key, fence, false, noFault, began)
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if r.Header.Get("X-Check-Slow") == "1" {
		u.slowNow.Add(1)
		time.Sleep(2 * time.Second) // past every upstream timeout: 504, UNKNOWN; or killed under
		u.slowNow.Add(-1)
	}
	io.WriteString(w, v)
}

// request is one client request.
type request struct {
	tenant, key, route, path, method string
	keyed, slow, twice               bool
	status                           int // the upstream's answer asked for: 0 for 200 with an effect
	note                             string
	amount                           int
	g                                *gatewayProc
}

// send sends q and records what it got: a 200 of a keyed request is a
// result given; a replay of a status its route does not store, or a
// tenant sent twice that was not refused, is a breach. It reports
// whether the client should back off (503, or no answer).
func (pe *productEnv) send(ctx context.Context, q request) (int, bool) {
	body := fmt.Sprintf(`{"amount":%d,"note":%q}`, q.amount, q.note)
	req, err := http.NewRequestWithContext(ctx, q.method, "http://"+q.g.listen+"/", strings.NewReader(body))
	if err != nil {
		return 0, false
	}
	if strings.HasPrefix(q.path, "//") {
		req.URL.Path = q.path
	} else {
		req.URL.Opaque = q.path
	}
	req.Header.Set("Content-Type", "application/json")
	if q.keyed {
		req.Header.Set("Idempotency-Key", q.key)
	}
	pe.setTenant(req.Header, q.tenant)
	if q.twice {
		req.Header.Add("X-Tenant-ID", q.tenant+"x")
	}
	hid := id(q.tenant, q.key)
	req.Header.Set("X-Check-Key", hid)
	req.Header.Set("X-Check-Route", q.route)
	if q.keyed {
		req.Header.Set("X-Check-Keyed", "1")
	}
	if q.slow {
		req.Header.Set("X-Check-Slow", "1")
	}
	if q.status != 0 {
		req.Header.Set("X-Check-Status", strconv.Itoa(q.status))
	}
	call := pe.rec.Now()
	req.Header.Set("X-Check-Began", strconv.FormatInt(call, 10))
	resp, err := pe.hc.Do(req)
	if err != nil {
		return 0, true
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, true
	}
	replayed := resp.Header.Get("Idempotent-Replayed") == "true"
	rt := pe.cfg.route(q.route)
	switch {
	case q.twice && resp.StatusCode != http.StatusBadRequest:
		pe.rec.saw(Violation{"tenant", hid, fmt.Sprintf("a request with X-Tenant-ID sent twice got %d, not 400 (%.80s)", resp.StatusCode, got)})
	case !q.keyed && !rt.passThrough && pe.cfg.requires(rt) && resp.StatusCode != http.StatusBadRequest:
		pe.rec.saw(Violation{"require-key", hid, fmt.Sprintf("%s %s without a key got %d, not 400; route %s requires one", q.method, q.path, resp.StatusCode, q.route)})
	case !q.keyed && !rt.passThrough && !pe.cfg.requires(rt) && bytes.Contains(got, []byte(`"key_required"`)):
		pe.rec.saw(Violation{"require-key", hid, fmt.Sprintf("%s %s without a key got 400 key_required; route %s does not require one", q.method, q.path, q.route)})
	case !q.keyed || rt.passThrough:
	case replayed && rt.disposition(resp.StatusCode) != "store":
		pe.rec.saw(Violation{"status", hid, fmt.Sprintf("a replay of status %d, which route %s's policy does not store (%s) (%.80s)",
			resp.StatusCode, q.route, rt.disposition(resp.StatusCode), got)})
	case resp.StatusCode == http.StatusOK:
		pe.rec.give(Given{Key: hid, Body: string(got), Replay: replayed, Call: call, Return: pe.rec.Now()})
	}
	pe.did(fmt.Sprintf("answer %d", resp.StatusCode))
	if replayed {
		pe.did("replayed")
	}
	return resp.StatusCode, resp.StatusCode == http.StatusServiceUnavailable
}

func (pe *productEnv) setTenant(h http.Header, tenant string) {
	if pe.cfg.tenantFrom != "authorization" {
		h.Set("X-Tenant-ID", tenant)
	}
	if pe.cfg.tenantFrom != "header" {
		h.Set("Authorization", "Bearer tok-"+tenant)
	}
}

// tenantSegment is the tenant as the admin API names it: the header's
// value; the hash of the Authorization header; or, from both, the hash
// of each source's name, count and values (docs/deployment.md, tenants).
func (pe *productEnv) tenantSegment(tenant string) string {
	switch pe.cfg.tenantFrom {
	case "header":
		return tenant
	case "authorization":
		return httpwire.SumTenant(httpwire.AppendField(nil, "Bearer tok-"+tenant))
	}
	var b []byte
	for _, s := range [][2]string{{"authorization", "Bearer tok-" + tenant}, {"header:X-Tenant-Id", tenant}} {
		b = httpwire.AppendField(b, s[0])
		b = binary.BigEndian.AppendUint64(b, 1)
		b = httpwire.AppendField(b, s[1])
	}
	return httpwire.SumTenant(b)
}

// draw draws one request of the workload.
func (pe *productEnv) draw(rng *rand.Rand) request {
	// Keys of o and p are sent as the API spells them (now and then
	// otherwise); keys of q under a spelling drawn each time, which the
	// fingerprint may take for another request (422).
	ns := []string{"o", "p", "q"}[rng.IntN(3)]
	keys := pe.keys[ns]
	k := rng.IntN(len(keys))
	q := request{tenant: pe.tenants[rng.IntN(len(pe.tenants))], key: keys[k], method: http.MethodPost, keyed: true,
		amount: 1 + k%3, note: "n" + strconv.Itoa(k), g: pe.gs[rng.IntN(len(pe.gs))]}
	q.route, q.path = "orders", "/v1/orders"
	if ns == "p" {
		q.route, q.path = "payments", "/v1/payments/"+strings.ToLower(q.key)
	}
	if ns == "q" || rng.IntN(10) == 0 {
		sp := spellings(q.path)
		q.path = sp[rng.IntN(len(sp))]
	}
	switch r := rng.IntN(100); {
	case r < 5:
		q.status = 401
	case r < 7:
		q.status = 409
	case r < 9:
		q.status = 500
	case r < 11:
		q.slow = true
	case r < 12:
		q.amount++ // the key reused for another request
	case r < 17:
		q.note = "n" + strconv.Itoa(rng.IntN(1000)) // another note: the same request where the fingerprint ignores it
	}
	return q
}

// run is the workload of one run.
func (pe *productEnv) run(ctx context.Context, w Workload, rec *Recorder, l *Ledger) {
	pe.rec, pe.ledger = rec, l
	defer pe.hc.CloseIdleConnections()
	clientLoop(ctx, w, pe.seed, func(ctx context.Context, rng *rand.Rand) bool {
		switch r := rng.IntN(100); {
		case r < 4:
			pe.operate(ctx, rng)
			return false
		case r < 6 && pe.cfg.tenantFrom != "authorization":
			q := pe.draw(rng)
			q.twice = true
			_, back := pe.send(ctx, q)
			return back
		case r < 9:
			q := pe.draw(rng)
			q.keyed = false
			_, back := pe.send(ctx, q)
			return back
		case r < 11:
			q := pe.draw(rng)
			q.route, q.path = "search", []string{"/v1/search", "/V1/Search/"}[rng.IntN(2)]
			_, back := pe.send(ctx, q)
			return back
		case r < 20:
			// Concurrent requests under one key with different bodies,
			// to both gateways: one runs, the others wait, replay, or
			// are refused; none gets another's bytes.
			q := pe.draw(rng)
			var wg sync.WaitGroup
			for i := range 3 {
				c := q
				c.g = pe.gs[i%len(pe.gs)]
				if i == 2 {
					c.note = fmt.Sprintf("c%d", rng.IntN(1000))
				}
				wg.Go(func() { pe.send(ctx, c) })
			}
			wg.Wait()
			return false
		}
		_, back := pe.send(ctx, pe.draw(rng))
		return back
	})
}

// admin sends an admin API call; auth says whether it carries the token
// (when there is one), origin is its Origin header ("": none).
func (pe *productEnv) admin(ctx context.Context, g *gatewayProc, method, path string, body any, auth bool, origin string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+g.admin+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth && pe.cfg.adminToken != "" {
		req.Header.Set("Authorization", "Bearer "+pe.cfg.adminToken)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := pe.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// operate is an operator's action on a key through a gateway's admin
// API: delete, force-delete, or resolve an UNKNOWN key by the ledger's
// word; authorised, or without the token, or from a foreign origin,
// which must change nothing.
func (pe *productEnv) operate(ctx context.Context, rng *rand.Rand) {
	ns := []string{"o", "p"}[rng.IntN(2)]
	tenant, key := pe.tenants[rng.IntN(len(pe.tenants))], pe.keys[ns][rng.IntN(len(pe.keys[ns]))]
	g := pe.gs[rng.IntN(len(pe.gs))]
	hid := id(tenant, key)
	path := "/v1/keys/" + pe.tenantSegment(tenant) + "/" + key
	auth, origin := true, ""
	switch rng.IntN(4) {
	case 0:
		origin = "http://evil.example"
	case 1:
		auth = pe.cfg.adminToken == "" // without the token: authorised only when there is none
	}
	authorised := origin == "" && auth
	noToken := !auth || pe.cfg.adminToken == ""
	refused := func(what string, status int, err error) {
		pe.did(fmt.Sprintf("admin unauthorised %d", status))
		if err == nil && status < 300 {
			pe.rec.saw(Violation{"admin", hid, fmt.Sprintf("%s (origin %q, token %t) got %d: it changed the key", what, origin, !noToken, status)})
		}
	}
	if rng.IntN(2) == 0 {
		force := rng.IntN(2) == 0
		p := path
		if force {
			p += "?force=true"
		}
		var status int
		var err error
		if authorised {
			lane, call := pe.rec.begin()
			status, _, err = pe.admin(ctx, g, http.MethodDelete, p, nil, true, "")
			out := Output{Existed: status == http.StatusNoContent}
			if err != nil || status >= 500 {
				out = Output{Info: true}
			}
			pe.rec.external(lane, call, Input{Kind: KDelete, Key: hid}, out)
			pe.did(fmt.Sprintf("admin delete %d", status))
			return
		}
		status, _, err = pe.admin(ctx, g, http.MethodDelete, p, nil, auth, origin)
		refused("DELETE "+p, status, err)
		return
	}
	status, b, err := pe.admin(ctx, g, http.MethodGet, path, nil, true, "")
	var view struct {
		State string
		Fence int64
	}
	if err != nil || status != http.StatusOK || json.Unmarshal(b, &view) != nil || view.State != "UNKNOWN" && rng.IntN(3) > 0 {
		return
	}
	res := map[string]any{"fence": view.Fence, "outcome": "not_executed"}
	v, done := pe.ledger.Lookup(hid, view.Fence)
	if done {
		res = map[string]any{"fence": view.Fence, "outcome": "completed", "status": 200, "body": v}
	}
	if !authorised {
		status, _, err = pe.admin(ctx, g, http.MethodPost, path+"/resolve", res, auth, origin)
		refused("POST resolve "+res["outcome"].(string), status, err)
		return
	}
	lane, call := pe.rec.begin()
	status, _, err = pe.admin(ctx, g, http.MethodPost, path+"/resolve", res, true, "")
	pe.did(fmt.Sprintf("admin resolve %s %d", res["outcome"], status))
	if done { // a resolution as completed lets nothing run again
		pe.rec.external(lane, call, Input{Kind: KResolve, Key: hid, HasResult: true, Result: v}, Output{Info: err != nil})
		return
	}
	// Resolved as not executed, the key may run once more: for the
	// invariants, as a delete.
	out := Output{Existed: status == http.StatusNoContent}
	if err != nil || status >= 500 {
		out = Output{Info: true}
	}
	pe.rec.external(lane, call, Input{Kind: KDelete, Key: hid}, out)
}

// finish, once the faults are healed: requests in flight at the upstream
// when their gateway is killed; a lease later every such key is listed
// UNKNOWN (with every other key the admin API reports UNKNOWN); half of
// them are retried (marked UNKNOWN), and retried again past the response
// retention, before the key retention: still not run again.
func (pe *productEnv) finish(ctx context.Context) ([]Violation, error) {
	defer pe.hc.CloseIdleConnections()
	for _, g := range pe.gs {
		if err := waitReady(ctx, g); err != nil {
			return nil, err
		}
	}
	var seen []Violation
	tenant := pe.tenants[0]
	zs := pe.keys["z"]
	orders := pe.cfg.route("orders")
	send := func(i int, g *gatewayProc, slow bool) {
		pe.send(ctx, request{tenant: tenant, key: zs[i], route: "orders", path: "/v1/orders", method: http.MethodPost, keyed: true,
			slow: slow, amount: 1, note: "z" + strconv.Itoa(i), g: g})
	}
	ret := pe.cfg.retention
	if orders.retention != 0 {
		ret = orders.retention
	}
	// zs[:4] in flight at the upstream when their gateway is killed
	// (abandoned); zs[4:] past the upstream timeout of the other (504,
	// marked UNKNOWN by the gateway itself), and sent again past the
	// response retention, before the key retention: still UNKNOWN, not
	// run again.
	var killed, timedOut, late sync.WaitGroup
	for i := range zs {
		if i < 4 {
			killed.Go(func() { send(i, pe.gs[0], true) })
		} else {
			timedOut.Go(func() { send(i, pe.gs[1], true) })
		}
	}
	late.Go(func() {
		timedOut.Wait()
		sleep(ctx, ret+300*time.Millisecond)
		for i := 4; i < len(zs); i++ {
			send(i, pe.gs[1], false)
		}
	})
	defer func() {
		pe.mu.Lock()
		defer pe.mu.Unlock()
		pe.t.Logf("product seed %d did: %v", pe.seed, pe.count)
	}()
	defer late.Wait()
	deadline := time.Now().Add(3 * time.Second)
	for pe.up.slowNow.Load() < int64(len(zs)) && time.Now().Before(deadline) {
		sleep(ctx, 5*time.Millisecond)
	}
	pe.gs[0].Kill()
	killed.Wait()
	if err := pe.gs[0].start(ctx); err != nil {
		return nil, err
	}
	if err := waitReady(ctx, pe.gs[0]); err != nil {
		return nil, err
	}
	lease := max(pe.cfg.lease, orders.lease)
	sleep(ctx, lease+300*time.Millisecond)
	for i := range 2 { // a retry takes over an abandoned key: UNKNOWN
		send(i, pe.gs[1], false)
	}
	marked := time.Now()
	v, err := pe.checkListed(ctx)
	if err != nil {
		return nil, err
	}
	seen = append(seen, v...)
	// Past the response's retention: still UNKNOWN (the invariants
	// bound its record's life from the first request only).
	sleep(ctx, time.Until(marked.Add(ret+300*time.Millisecond)))
	for i := range 2 {
		send(i, pe.gs[1], false)
	}
	return seen, nil
}

// waitReady waits until g's /readyz answers 200 (its store answers).
func waitReady(ctx context.Context, g *gatewayProc) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + g.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("gateway %s not ready after 30s", g.listen)
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

// checkListed: every key of the run that the admin API reports UNKNOWN
// (abandoned by a killed gateway, or marked) is in its UNKNOWN listing.
func (pe *productEnv) checkListed(ctx context.Context) ([]Violation, error) {
	g := pe.gs[1]
	var out []Violation
	for _, tenant := range pe.tenants {
		seg := pe.tenantSegment(tenant)
		var unknown []string
		for _, ns := range []string{"o", "q", "p", "z"} {
			for _, k := range pe.keys[ns] {
				if pe.state(ctx, g, seg, k) == "UNKNOWN" {
					unknown = append(unknown, k)
				}
			}
		}
		pe.mu.Lock()
		pe.count["unknown keys listed"] += len(unknown)
		pe.mu.Unlock()
		if len(unknown) == 0 {
			continue
		}
		status, b, err := pe.admin(ctx, g, http.MethodGet, "/v1/keys?state=unknown&limit=1000&tenant="+seg, nil, true, "")
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("listing the UNKNOWN keys: %d %v %s", status, err, b)
		}
		var page struct{ Keys []struct{ Key string } }
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, err
		}
		for _, k := range unknown {
			listed := slices.ContainsFunc(page.Keys, func(v struct{ Key string }) bool { return v.Key == k })
			if !listed && pe.state(ctx, g, seg, k) == "UNKNOWN" {
				out = append(out, Violation{"unlisted", id(tenant, k), "the admin API reports the key UNKNOWN, and its UNKNOWN listing leaves it out"})
			}
		}
	}
	return out, nil
}

// state is a key's state as the admin API reports it ("" when absent).
func (pe *productEnv) state(ctx context.Context, g *gatewayProc, seg, key string) string {
	status, b, err := pe.admin(ctx, g, http.MethodGet, "/v1/keys/"+seg+"/"+key, nil, true, "")
	if err != nil || status != http.StatusOK {
		return ""
	}
	var view struct{ State string }
	_ = json.Unmarshal(b, &view)
	return view.State
}
