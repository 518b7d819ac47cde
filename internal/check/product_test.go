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
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/httpwire"
)

// The product check: two `idem serve` processes on one Redis, each run on
// a configuration FILE drawn from its seed (store given only there),
// driven as a product is: several tenants sharing keys, every spelling of
// a route's path, keys sent twice, keyless requests, statuses the route's
// policy stores, releases or leaves unknown, operators on the admin API
// with and without the token and from a foreign origin, gateways killed
// mid-request, and reloaded (SIGHUP) mid-run to a second configuration
// drawn from the seed, after a broken file they must refuse. The config
// draws takeover, the error format, a route's key from the body, its own
// reconcile URL (which the upstream serves from the ledger); requests
// come with every accepted spelling of the key and with what must be
// refused before any key is
// taken (a lower-case method, malformed keys). The oracle is the
// configuration the harness drew, with the precedence it documents (an
// IDEM_ variable over the file), never what the binary says it runs;
// across the reload, a request is judged only where every configuration
// it may have run under agrees.

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
	keyFrom                 string // "": the Idempotency-Key header; or json:/request_id
	reconcileURL            string // its own lookup ("": none)
}

// productConfig is one run's configuration.
type productConfig struct {
	storeURL, upstream      string
	tenantFrom              string // header (X-Tenant-ID), authorization, or both
	methods                 string // the top level's: never POST, so a POST no route takes passes through unprotected
	requireKey              bool   // the file's require-key
	envRequireKey           string // IDEM_REQUIRE_KEY ("": unset), the file's opposite: it wins over the file
	flagRequireKey          string // --require-key on the command line ("": not given): it wins over the variable and the file
	retention, keyRetention time.Duration
	adminToken              string // "" : none (the admin API is on loopback)
	lease                   time.Duration
	routes                  []productRoute
	takeover                string // "" (unset: unknown), unknown or run
	envTakeover             bool   // takeover given as IDEM_TAKEOVER, the file saying the other
	errorFormat             string // problem or stripe
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
	// The flag is drawn apart, so that the other draws of a seed stay
	// what they were before it existed (the seeds in docs/product-check.md).
	// Given, it says the opposite of the variable where there is one.
	if flags := rand.New(rand.NewPCG(seed, 78)); flags.IntN(2) == 0 {
		c.flagRequireKey = strconv.FormatBool(flags.IntN(2) == 0)
		if c.envRequireKey != "" {
			c.flagRequireKey = strconv.FormatBool(c.envRequireKey != "true")
		}
	}
	if rng.IntN(10) > 0 {
		c.keyRetention = c.retention + 4*time.Second
	}
	if rng.IntN(2) == 0 {
		c.adminToken = fmt.Sprintf("admin-token-%08d", seed) // 16 bytes at least: idem refuses a shorter token
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
	// Drawn after the rest, so that a seed keeps the knobs above.
	c.takeover = []string{"", "unknown", "run", "run"}[rng.IntN(4)]
	c.envTakeover = c.takeover != "" && rng.IntN(3) == 0
	c.errorFormat = []string{"problem", "stripe"}[rng.IntN(2)]
	if rng.IntN(2) == 0 {
		c.routes[0].keyFrom = "json:/request_id"
	}
	for i := range 2 {
		if rng.IntN(2) == 0 {
			c.routes[i].reconcileURL = fmt.Sprintf("%s/lookup/%s/{tenant}/{key}?fence={fence}", upstream, c.routes[i].name)
		}
	}
	_ = rng.IntN(2) // drew a host in payments' pattern, which idem refuses now: kept, so that a seed draws as before
	return c
}

// productProfiles is the number of the product check's profiles; a
// seed's residue picks its run's (seed % productProfiles). Profiles 0 and
// 1 force, over the draw, settings that between them give each product
// mutation the knob it needs to show (docs/product-check.md): the Stripe
// format and problem+json, takeover run from the file and unknown from
// IDEM_TAKEOVER, the flag over the variable and the variable with no
// flag, a reload refused for a restart-only change and for a route's
// lease and a lookup's host, statuses overrides, the key in the
// body, both reconcile lookups, a key retention, an admin token. Profile 2
// keeps the free draw. A short campaign runs productProfiles consecutive
// seeds, one of each, so that no knob is left to a seed's luck.
const productProfiles = 3

// force sets the knobs of seed's profile over c's draw (and over a
// reload's, drawn from c: what a reload cannot change is c's already).
func (c *productConfig) force(seed uint64) {
	switch seed % productProfiles {
	case 0:
		c.errorFormat, c.tenantFrom, c.takeover, c.envTakeover = "stripe", "both", "run", false
		c.envRequireKey = strconv.FormatBool(!c.requireKey)
		c.flagRequireKey = strconv.FormatBool(c.requireKey) // the variable's opposite: the flag wins over it
		c.routes[0].store, c.routes[0].release, c.routes[0].unknown = []string{"409"}, []string{"5xx"}, nil
		c.routes[1].store = []string{"500"}
	case 1:
		c.errorFormat, c.tenantFrom, c.takeover, c.envTakeover = "problem", "header", "unknown", true
		c.envRequireKey, c.flagRequireKey = strconv.FormatBool(!c.requireKey), "" // the variable over the file, no flag
		c.routes[0].store, c.routes[0].release, c.routes[0].unknown = nil, []string{"409"}, []string{"500"}
	default:
		return
	}
	if c.keyRetention == 0 {
		c.keyRetention = c.retention + 4*time.Second
	}
	if c.adminToken == "" {
		c.adminToken = fmt.Sprintf("admin-token-%08d", seed) // 16 bytes at least: idem refuses a shorter token
	}
	c.routes[0].keyFrom = "json:/request_id"
	for i := range 2 {
		c.routes[i].reconcileURL = fmt.Sprintf("%s/lookup/%s/{tenant}/{key}?fence={fence}", c.upstream, c.routes[i].name)
	}
}

// drawReload draws the configuration the run reloads to (SIGHUP): a
// second draw from the seed, with what a reload cannot change kept
// (cmd/idem's restartOnly: the store, the tenant's sources, the admin
// token, takeover, the error format, a key retention turned off; the
// environment, which a process reads once; a route's reconcile URL, whose
// first one needs a restart)
// and the top-level retention always changed, so that GET /v1/config
// shows the reload.
func (c *productConfig) drawReload(seed uint64) *productConfig {
	n := drawProductConfig(seed^0x9e3779b97f4a7c15, c.storeURL, c.upstream)
	n.retention = 3*time.Second - c.retention
	if n.keyRetention != 0 || c.keyRetention != 0 { // once on, a reload cannot turn it off (a restart can)
		n.keyRetention = n.retention + 4*time.Second
	}
	n.keep(c)
	return n
}

// keep sets in n, a reload of c, what a reload cannot change: c's.
func (n *productConfig) keep(c *productConfig) {
	n.tenantFrom, n.adminToken, n.envRequireKey, n.flagRequireKey = c.tenantFrom, c.adminToken, c.envRequireKey, c.flagRequireKey
	n.takeover, n.envTakeover, n.errorFormat = c.takeover, c.envTakeover, c.errorFormat
	for i := range n.routes {
		n.routes[i].reconcileURL = c.routes[i].reconcileURL
	}
}

// invalidReloads are the files a reload must refuse, keeping the running
// configuration: a restart-only setting changed, a route whose lease is
// shorter than its upstream timeout, a file that is not YAML, a route's
// reconcile URL with {key} in its host (a client's key would pick the
// server the lookup's token goes to).
var invalidReloads = []string{"store", "takeover", "lease", "yaml", "reconcile-host"}

// lookups reports whether a route of c has its own reconcile URL: a
// gateway started without one refuses any reload that adds one, so the
// "reconcile-host" file of a c without one would be refused for that,
// whatever its host.
func (c *productConfig) lookups() bool {
	return slices.ContainsFunc(c.routes, func(rt productRoute) bool { return rt.reconcileURL != "" })
}

// invalidFile is c's file broken the way kind says.
func (c *productConfig) invalidFile(kind string) string {
	f := c.file()
	switch kind {
	case "store":
		return strings.Replace(f, "store: "+c.storeURL, "store: redis://127.0.0.1:1", 1)
	case "takeover": // c.envTakeover false: the file's value counts
		other := map[string]string{"": "run", "unknown": "run", "run": "unknown"}[c.takeover]
		if c.takeover == "" {
			return f + "takeover: " + other + "\n"
		}
		return strings.Replace(f, "takeover: "+c.takeover+"\n", "takeover: "+other+"\n", 1)
	case "lease":
		return strings.Replace(f, "    name: payments\n", "    name: payments\n    lease: 100ms\n    upstream-timeout: 1s\n", 1)
	case "reconcile-host": // c.lookups(): else the start's lack of a lookup refuses it
		// Valid YAML, {key} in the path too: only the host's {key} is amiss.
		host := "    reconcile-url: http://{key}.lookup.invalid/lookup/orders/{key}\n"
		if was := c.routes[0].reconcileURL; was != "" {
			return strings.Replace(f, "    reconcile-url: "+was+"\n", host, 1)
		}
		return strings.Replace(f, "    name: orders\n", "    name: orders\n"+host, 1)
	}
	return f + "routes: [\n"
}

// file is the config file of c.
func (c *productConfig) file() string {
	var b strings.Builder
	fmt.Fprintf(&b, "store: %s\nupstream: %s\nlog-level: debug\nstore-timeout: 1s\n", c.storeURL, c.upstream)
	fmt.Fprintf(&b, "lease: %v\nupstream-timeout: %v\nmethods: %s\nrequire-key: %t\n", c.lease, c.lease, c.methods, c.requireKey)
	fmt.Fprintf(&b, "retention: %v\nkey-retention: %v\nerror-format: %s\n", c.retention, c.keyRetention, c.errorFormat)
	switch {
	case c.envTakeover: // the file's value is shadowed by the variable
		fmt.Fprintf(&b, "takeover: %s\n", map[string]string{"unknown": "run", "run": "unknown"}[c.takeover])
	case c.takeover != "":
		fmt.Fprintf(&b, "takeover: %s\n", c.takeover)
	}
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
		if rt.keyFrom != "" {
			fmt.Fprintf(&b, "    key-from: %s\n", rt.keyFrom)
		}
		if rt.reconcileURL != "" {
			fmt.Fprintf(&b, "    reconcile-url: %s\n", rt.reconcileURL)
		}
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
	var env []string
	if c.envRequireKey != "" {
		env = append(env, "IDEM_REQUIRE_KEY="+c.envRequireKey)
	}
	if c.envTakeover {
		env = append(env, "IDEM_TAKEOVER="+c.takeover)
	}
	return env
}

// flags is the command line of the run's gateways past --listen,
// --admin and --config.
func (c *productConfig) flags() []string {
	if c.flagRequireKey != "" {
		return []string{"--require-key=" + c.flagRequireKey}
	}
	return nil
}

func (c *productConfig) text() string {
	return fmt.Sprintf("# environment: %s\n# command line: idem serve --listen ADDR --admin ADDR --config FILE %s\n%s",
		strings.Join(c.env(), " "), strings.Join(c.flags(), " "), c.file())
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
// require-key, else the top level's: the flag, else IDEM_REQUIRE_KEY,
// else the file's.
func (c *productConfig) requires(rt *productRoute) bool {
	if rt.requireKey != nil {
		return *rt.requireKey
	}
	if c.flagRequireKey != "" {
		return c.flagRequireKey == "true"
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
func (rt *productRoute) disposition(status int, format string) string {
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
	case 425, 429, 401, 403, 407, 411, 413, 414, 415, 431:
		return "release"
	case 408, 502, 503, 504: // a 503 or a timeout layer's 408 does not prove that nothing ran
		return "unknown"
	case 400:
		if format == "stripe" { // Stripe saves no result for a request refused before it ran
			return "release"
		}
	}
	return "store"
}

// inFlightAnswers are, by shape, the answers of a downstream idempotent
// service whose key is running, as the upstream passes them on after its
// own effect (docs/problems.md): idem's in the problem format (409
// key_in_flight), idem's in the stripe format (429 lock_timeout, idem_code
// key_in_flight), and Stripe's own (409 idempotency_key_in_use). Each
// says the downstream work is under way, not what came of it: whatever
// a route's statuses say, the key is UNKNOWN, neither stored nor released.
var inFlightAnswers = map[string]struct {
	status int
	ctype  string
	body   string
}{
	"idem-problem": {409, "application/problem+json",
		`{"type":"https://idem.dev/problems#key_in_flight","title":"A request with this Idempotency-Key is in progress","status":409,"code":"key_in_flight"}`},
	"idem-stripe": {429, "application/json",
		`{"error":{"type":"idempotency_error","code":"lock_timeout","message":"A request with this Idempotency-Key is in progress","idem_code":"key_in_flight"}}`},
	"stripe": {409, "application/json",
		`{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"There is currently another in-progress request using this Idempotent Key."}}`},
}

// isInFlight says whether an answer is one of inFlightAnswers.
func isInFlight(status int, body []byte) bool {
	for _, a := range inFlightAnswers {
		if a.status == status && strings.TrimSpace(string(body)) == a.body {
			return true
		}
	}
	return false
}

// inFlightShapes are the shapes the run's upstream passes on: idem's in
// the configured error format (a downstream idem deployed as this one
// is), and Stripe's. Under the mutation that stores them, the 409s are
// replayed and the stripe format's 429 released (run twice), unless a
// route's statuses say otherwise: both slips are seen.
func (pe *productEnv) inFlightShapes() []string {
	return []string{"idem-" + pe.cfg.errorFormat, "stripe"}
}

// answerDisposition is what rt's policy does with an upstream answer:
// UNKNOWN for a passed-on downstream key in flight, else disposition.
func (rt *productRoute) answerDisposition(status int, body []byte, format string) string {
	if isInFlight(status, body) {
		return "unknown"
	}
	return rt.disposition(status, format)
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
	out := []string{strings.ToUpper(path), path + "/", path + ";v=1", path + ".", "/" + path, path + "%2F", path + ".json"}
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
	store   *productStores // the run's store, drawn from its seed
	up      *productUpstream
	cfg     *productConfig      // the configuration the run starts on: what a reload cannot change is read here
	next    *productConfig      // the one it reloads to (nil: no reload this run)
	invalid []string            // the broken files refused, in turn, before the reload, of invalidReloads
	refused map[string]int      // kind of invalidReloads → how many gateways refused it (guarded by mu)
	missed  map[string][]string // kind → why each gateway that did not refuse it got no such file (guarded by mu)
	seed    uint64
	tenants []string
	segs    map[string]string   // the gateway's tenant (Idempotency-Tenant) → the run's tenant
	keys    map[string][]string // namespace → keys
	rec     *Recorder
	ledger  *Ledger
	clock   *redisClock // the Redis server's, moved by the nemesis (product_clock_test.go)
	fences  fenceOrder  // the fences the upstream got, per key
	hc      *http.Client

	// epoch is where the reload is: 0 before it (cfg runs), 1 while
	// either may run (from before the new file is written until every
	// gateway serves it), 2 once both serve next. A request is judged by
	// the configurations of the epochs between its start and its end.
	epoch     atomic.Int32
	reloadAt  int64 // the steps taken when a client reloads
	reloading atomic.Bool
	reloadErr error        // set by the reload, read by finish after the clients
	fileMu    sync.RWMutex // held while the file is broken: no gateway (re)starts on it

	mu    sync.Mutex
	count map[string]int // what the run did, for its log line: that each part of the workload ran
}

// did counts one thing the run did.
func (pe *productEnv) did(what string) {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	pe.count[what]++
}

// configs are the configurations a request begun at epoch from and
// answered (or seen by the upstream) at epoch to may have run under.
func (pe *productEnv) configs(from, to int32) []*productConfig {
	switch {
	case pe.next == nil || to == 0:
		return []*productConfig{pe.cfg}
	case from == 2:
		return []*productConfig{pe.next}
	}
	return []*productConfig{pe.cfg, pe.next}
}

// final is the configuration the run ends on.
func (pe *productEnv) final() *productConfig {
	if pe.next != nil {
		return pe.next
	}
	return pe.cfg
}

func productEnvSetup(t *testing.T) *Env {
	bin := buildIdem(t)
	clock := newRedisClock(t)
	pe := &productEnv{t: t, file: filepath.Join(t.TempDir(), "idem.yaml"), store: newProductStores(t, clock.env()),
		up: &productUpstream{}, hc: &http.Client{Timeout: 5 * time.Second}, clock: clock}
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
		pe.store.watch(g)
		pe.gs = append(pe.gs, g)
	}
	env := &Env{
		Prepare: pe.prepare,
		Clients: func(ctx context.Context, w Workload, seed uint64, rec *Recorder, l *Ledger, _ string, _ []string) {
			pe.run(ctx, w, rec, l)
		},
		Finish:   pe.finishStore,
		Keep:     pe.store.keep,
		Life:     pe.lives,
		Nemeses:  []Nemesis{productKill{pe, pe.gs[0]}, productKill{pe, pe.gs[1]}, storePause{pe}, storeDrop{pe}},
		StartRun: func() error { pe.fences.reset(); return clock.reset() },
	}
	env.Nemeses = append(env.Nemeses, clock.nemeses(pe)...)
	return env
}

// productKill is GatewayKill that waits while the config file is broken
// on purpose: a gateway restarted then would not start.
type productKill struct {
	pe *productEnv
	g  *gatewayProc
}

// Name implements Nemesis.
func (productKill) Name() string { return "SIGKILL of one idem serve" }

// Inject implements Nemesis.
func (n productKill) Inject(context.Context, *rand.Rand) (func() error, error) {
	n.pe.fileMu.RLock()
	n.g.Kill()
	n.pe.fileMu.RUnlock()
	return func() error {
		n.pe.fileMu.RLock()
		defer n.pe.fileMu.RUnlock()
		return n.g.start(context.Background())
	}, nil
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

// drawReloads draws from seed whether the run on c (forced) reloads, and
// the broken files it refuses first, in turn. Profiles 0 and 1 reload
// after the file drawn, if any, and a file refused for a restart-only
// change, or for a route's lease and for a lookup's host (both their
// routes have one).
func drawReloads(seed uint64, c *productConfig) (reload bool, invalid []string) {
	rng := rand.New(rand.NewPCG(seed, 79))
	if rng.IntN(5) > 0 {
		reload = true
		if rng.IntN(3) > 0 {
			kinds := slices.DeleteFunc(slices.Clone(invalidReloads), func(k string) bool {
				// IDEM_TAKEOVER shadows the file's takeover: changing it changes nothing.
				return k == "takeover" && c.envTakeover || k == "reconcile-host" && !c.lookups()
			})
			invalid = []string{kinds[rng.IntN(len(kinds))]}
		}
	}
	forced := [][]string{{"store"}, {"lease", "reconcile-host"}, nil}[seed%productProfiles]
	for _, k := range forced {
		if !slices.Contains(invalid, k) {
			invalid = append(invalid, k)
		}
	}
	return reload || forced != nil, invalid
}

// prepare draws the run's configuration, writes it, and starts both
// gateways on it.
func (pe *productEnv) prepare(ctx context.Context, seed uint64) (string, error) {
	pe.seed = seed
	pe.count = map[string]int{}
	pe.cfg = drawProductConfig(seed, pe.store.draw(seed).url, "http://"+pe.up.addr)
	pe.next, pe.invalid, pe.refused, pe.missed, pe.reloadErr = nil, nil, map[string]int{}, map[string][]string{}, nil
	pe.epoch.Store(0)
	pe.reloading.Store(false)
	pe.cfg.force(seed)
	if seed%productProfiles == 0 {
		// Profile 0's store is a private Redis (force): its clock steps
		// back once, at the first request the upstream refuses with 400
		// or 401, whose corrected retry takes the key again at once
		// (fenceOrder), whatever the faults drawn.
		pe.clock.arm(-500 * time.Millisecond)
	}
	var reload bool
	if reload, pe.invalid = drawReloads(seed, pe.cfg); reload {
		pe.next = pe.cfg.drawReload(seed)
		pe.next.force(seed)
		pe.next.keep(pe.cfg)
	}
	pe.tenants = nil
	pe.segs = map[string]string{}
	for i := range 3 {
		t := fmt.Sprintf("t%s%c", strconv.FormatUint(seed, 36), 'a'+i)
		pe.tenants = append(pe.tenants, t)
		pe.segs[pe.tenantSegment(t)] = t
	}
	pe.keys = map[string][]string{}
	for _, ns := range []string{"o", "q", "p", "z", "y", "py"} {
		for i := range 8 {
			k := fmt.Sprintf("r%s-%s%d", strconv.FormatUint(seed, 36), ns, i)
			if ns == "o" && i%2 == 1 {
				k = fmt.Sprintf("r%s %d-%s%d", strconv.FormatUint(seed, 36), i, ns, i) // a space inside: a valid key
			}
			pe.keys[ns] = append(pe.keys[ns], k)
		}
	}
	if err := os.WriteFile(pe.file, []byte(pe.cfg.file()), 0o644); err != nil {
		return "", err
	}
	text := pe.cfg.text()
	if pe.next != nil {
		for _, kind := range pe.invalid {
			text += fmt.Sprintf("# reloaded (SIGHUP) mid-run, first to a file the gateway must refuse (%s):\n%s", kind, pe.cfg.invalidFile(kind))
		}
		text += "# then reloaded (SIGHUP) to:\n" + pe.next.file()
	}
	if pe.cfg.flagRequireKey != "" {
		pe.did("flag require-key")
	}
	for _, g := range pe.gs {
		g.Kill()
		g.env = append(pe.cfg.env(), "SSL_CERT_FILE="+pe.store.tls.ca) // the CA of the rediss:// form's Redis, as a deployment trusts a private one
		g.args = append([]string{"--config", pe.file}, pe.cfg.flags()...)
		if err := g.start(ctx); err != nil {
			return text, fmt.Errorf("%w\nthe configuration:\n%s", err, text)
		}
	}
	return text, nil
}

// id is the history's name of a tenant's key.
func id(tenant, key string) string { return tenant + "/" + key }

// routeOfKey is the name of a key's route, by its namespace.
func routeOfKey(key string) string {
	if key[strings.LastIndexByte(key, '-')+1] == 'p' {
		return "payments"
	}
	return "orders"
}

// finalOnly says whether the keys of namespace ns are used only once the
// run ends on its last configuration (finish): z, and the probes y
// (orders) and py (payments).
func finalOnly(ns string) bool { return ns == "z" || ns == "y" || ns == "py" }

// lives is the life of each key: the shortest its route has in the
// configurations the run ran (a reload may shorten it; the keys of
// finalOnly namespaces are used only once the run ends on the last).
func (pe *productEnv) lives() map[string]int64 {
	out := map[string]int64{}
	for _, tenant := range pe.tenants {
		for ns, keys := range pe.keys {
			cfgs := pe.configs(0, 2)
			if finalOnly(ns) {
				cfgs = []*productConfig{pe.final()}
			}
			for _, k := range keys {
				life := time.Duration(1<<63 - 1)
				for _, c := range cfgs {
					life = min(life, c.life(c.route(routeOfKey(k))))
				}
				if ns != "z" { // moved forward, the Redis clock ends records early; not in the final phase
					life -= pe.clock.shortened()
				} else {
					life -= pe.clock.finalMove() // but past the last retries' every life
				}
				out[id(tenant, k)] = max(int64(life), 1) // moves past its whole life: it may end at once
			}
		}
	}
	return out
}

// What a configuration does with a request.
const (
	protects = iota // its route protects it and the gateway sees its key
	refuses         // its route protects it, it has no key the gateway sees, and the route requires one
	forwards        // it reaches the upstream without a fence
)

// judge says what c does with q.
func (c *productConfig) judge(q *request) int {
	rt := c.route(q.route)
	switch {
	case rt == nil || rt.passThrough:
		return forwards // no route protects it, and the top-level methods leave POST out
	case q.hdrKey != "" || q.bodyKey && rt.keyFrom != "":
		return protects
	case c.requires(rt):
		return refuses
	}
	return forwards
}

// all says whether every configuration of cfgs does what with q.
func all(cfgs []*productConfig, q *request, what int) bool {
	for _, c := range cfgs {
		if c.judge(q) != what {
			return false
		}
	}
	return true
}

// productUpstream is the API behind the gateways. A request of a
// protected route applies an effect on the ledger under the fence the
// gateway sends; one that arrives without a fence though the oracle says
// its route protects it is an escape. It serves the routes' reconcile
// lookups from the ledger.
type productUpstream struct {
	env     *productEnv
	addr    string
	slowNow atomic.Int64 // slow requests in flight
	tenants sync.Map     // key's id → the Idempotency-Tenant its effect was applied with
}

func (u *productUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	pe := u.env
	if strings.HasPrefix(r.URL.Path, "/lookup/") {
		u.lookup(w, r)
		return
	}
	w.Header().Set("X-Check-Upstream", "1")
	q := request{route: r.Header.Get("X-Check-Route"),
		bodyKey: r.Header.Get("X-Check-Body-Key") == "1", hdrKey: r.Header.Get("X-Check-Header-Key")}
	key := r.Header.Get("X-Check-Key")
	rec, l := pe.rec, pe.ledger
	if rec == nil || pe.cfg.route(q.route) == nil || pe.cfg.route(q.route).passThrough {
		io.WriteString(w, "passed")
		return
	}
	if bad := r.Header.Get("X-Check-Bad"); bad != "" {
		rec.saw(Violation{"refusal", key, fmt.Sprintf("%s %s reached the upstream; the gateway must refuse it (400 %s) whatever its configuration",
			r.Method, r.RequestURI, bad)})
	}
	began, _ := strconv.ParseInt(r.Header.Get("X-Check-Epoch"), 10, 32)
	cfgs := pe.configs(int32(began), pe.epoch.Load())
	fenceHdr := r.Header.Get("Idempotency-Fence")
	if fenceHdr == "" {
		switch {
		case all(cfgs, &q, protects):
			rec.saw(Violation{"escape", key, fmt.Sprintf("%s %s with a key reached the upstream unprotected (no Idempotency-Fence); route %s protects it",
				r.Method, r.RequestURI, q.route)})
		case all(cfgs, &q, refuses):
			rec.saw(Violation{"require-key", key, fmt.Sprintf("%s %s without a key reached the upstream; route %s requires one", r.Method, r.RequestURI, q.route)})
		}
		io.WriteString(w, "unprotected")
		return
	}
	tenant, plain, _ := strings.Cut(key, "/")
	if got := r.Header.Get("Idempotency-Tenant"); got != pe.tenantSegment(tenant) {
		rec.saw(Violation{"tenant", key, fmt.Sprintf("the upstream got Idempotency-Tenant %q, not the request's %q", got, pe.tenantSegment(tenant))})
	}
	if got := r.Header.Get("Idempotency-Key"); got != plain {
		rec.saw(Violation{"key-form", key, fmt.Sprintf("the upstream got Idempotency-Key %q for the key %q (sent as %q)", got, plain, q.hdrKey)})
	}
	dedup := false
	if prev := r.Header.Get("Idempotency-Previous-Fence"); prev != "" {
		// A takeover under takeover: run. The provider deduplicates by
		// key: an attempt that took effect is not applied again.
		dedup = true
		pe.did("takeover run")
		if pe.cfg.takeover != "run" {
			rec.saw(Violation{"takeover", key, fmt.Sprintf("a takeover (Idempotency-Previous-Fence %s) was sent again to the upstream; takeover is %q", prev, pe.cfg.takeover)})
		}
	}
	fence, _ := strconv.ParseInt(fenceHdr, 10, 64)
	pe.sawFence(key, fence, r)
	after := false // a 503 that comes after the effect
	if s := r.Header.Get("X-Check-Status"); s != "" {
		if code, _ := strconv.Atoi(s); code != http.StatusServiceUnavailable {
			w.WriteHeader(code) // refused: nothing ran
			io.WriteString(w, "status "+s)
			return
		}
		after = true
	}
	time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	start, _ := strconv.ParseInt(r.Header.Get("X-Check-Began"), 10, 64)
	u.tenants.Store(key, r.Header.Get("Idempotency-Tenant"))
	if r.Header.Get("X-Check-Slow") == "before" {
		// Past the upstream timeout before the effect: the key is
		// UNKNOWN with nothing done, and a lookup in between promises
		// that this fence will not be applied (the ledger refuses it).
		time.Sleep(2 * time.Second)
	}
	v, err := l.Apply(key, fence, dedup, noFault, start)
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if a, ok := inFlightAnswers[r.Header.Get("X-Check-In-Flight")]; ok {
		// The upstream took its effect, then called a downstream
		// idempotent service under a key of its own, found that key
		// running, and passed the answer on.
		w.Header().Set("Content-Type", a.ctype)
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
		return
	}
	if after {
		// What a proxy in front of the work answers once the request was
		// delivered (Envoy's UC reset, Heroku's H12 timeout, an
		// http.TimeoutHandler): 503, and the effect took place.
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "status 503")
		return
	}
	if r.Header.Get("X-Check-Slow") == "1" {
		u.slowNow.Add(1)
		time.Sleep(2 * time.Second) // past every upstream timeout: 504, UNKNOWN; or killed under
		u.slowNow.Add(-1)
	}
	io.WriteString(w, v)
}

// lookup answers a route's reconcile lookup, GET
// /lookup/ROUTE/TENANT/KEY?fence=N, from the ledger (docs/reconcile.md):
// 200 with the effect's fence, the tenant it was applied with and its
// value, or 404 (which promises the fence will not be applied later).
func (u *productUpstream) lookup(w http.ResponseWriter, r *http.Request) {
	pe := u.env
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/lookup/"), "/", 3)
	if len(parts) != 3 || pe.rec == nil {
		http.NotFound(w, r)
		return
	}
	route, seg, key := parts[0], parts[1], parts[2]
	hid := id(pe.segs[seg], key)
	fence, _ := strconv.ParseInt(r.URL.Query().Get("fence"), 10, 64)
	switch {
	case pe.segs[seg] == "":
		pe.rec.saw(Violation{"reconcile", hid, fmt.Sprintf("a lookup for the tenant %q, which is none of the run's", seg)})
	case routeOfKey(key) != route:
		pe.rec.saw(Violation{"reconcile", hid, fmt.Sprintf("the lookup of route %s was asked about a key of route %s", route, routeOfKey(key))})
	case r.Header.Get("Idempotency-Key") != key || r.Header.Get("Idempotency-Fence") != strconv.FormatInt(fence, 10):
		pe.rec.saw(Violation{"reconcile", hid, fmt.Sprintf("the lookup's Idempotency-Key %q and Idempotency-Fence %q are not its URL's %q and %d",
			r.Header.Get("Idempotency-Key"), r.Header.Get("Idempotency-Fence"), key, fence)})
	}
	w.Header().Set("Idempotency-Key", key)
	if zs := pe.keys["z"]; len(zs) > 0 && key == zs[len(zs)-1] {
		// The ledger cannot answer for the final phase's last key (its
		// database is down): the key stays UNKNOWN to the end, through
		// the retries past every life (finish).
		pe.did("lookup unavailable")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	e, done := pe.ledger.LookupEffect(hid, fence)
	if !done {
		pe.did("lookup not executed")
		w.WriteHeader(http.StatusNotFound)
		return
	}
	pe.did("lookup completed")
	tenant, _ := u.tenants.Load(hid)
	ten, _ := tenant.(string)
	w.Header().Set("Idempotency-Fence", strconv.FormatInt(e.Fence, 10))
	w.Header().Set("Idempotency-Tenant", ten)
	w.Header().Set("Idempotency-Original-Status", "200")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, e.Value)
}

// request is one client request.
type request struct {
	tenant, key, route, path, method string
	hdrKey                           string // the Idempotency-Key header as sent ("": none)
	hdrTwice                         bool   // the header sent twice
	bodyKey                          bool   // the key in the body's request_id
	bodyOther                        string // another key in the body than the header's ("": none)
	ctype                            string // the Content-Type: "" application/json, "-" none
	spoil                            string // the key in a body only a lenient reader reads: "case" (Request_Id), "bom", "trailing" ("": valid JSON)
	bad                              string // the code of the 400 every configuration answers: it must not reach the upstream
	override, overrideTo             string // a method override: the header (or _method, the query parameter) and the method it names
	slow, twice                      bool
	slowBefore                       bool   // slow before the effect, not after
	retried                          bool   // refused by the upstream (status 400 or 401), then sent again at once, corrected
	inFlight                         string // the upstream's answer after its effect: a downstream key in flight (inFlightAnswers), "" none
	afterInFlight                    bool   // sent after an answer of inFlight under the key: the key is UNKNOWN
	status                           int    // the upstream's answer asked for: 0 for 200 with an effect
	note                             string
	amount                           int
	g                                *gatewayProc
}

// keyForms are the spellings of a valid key in the Idempotency-Key
// header, all of them the same key (idemhttp.KeyFromHeader): bare, as an
// RFC 9651 string, with spaces and tabs around either.
func keyForm(rng *rand.Rand, key string) string {
	switch rng.IntN(6) {
	case 0, 1:
		return `"` + key + `"`
	case 2:
		return "  " + key + "\t"
	case 3:
		return ` "` + key + `" `
	}
	return key
}

// bodyTypes are the Content-Types a body with its key in request_id is
// sent with: application/json, none, and types that are not JSON's.
var bodyTypes = []string{"", "-", "text/plain", "", "application/json, text/plain", "text/json"}

// overrideForms are where Rails, Spring, ASP.NET and Express read a
// method override from ("_method": the query parameter).
var overrideForms = []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "_method"}

// overrideMethod is a method the top level protects in every
// configuration of the run, "" when there is none.
func (pe *productEnv) overrideMethod() string {
	for _, m := range []string{"PATCH", "PUT"} {
		if !slices.ContainsFunc(pe.configs(0, 2), func(c *productConfig) bool { return !strings.Contains(c.methods, m) }) {
			return m
		}
	}
	return ""
}

// errorCode reads the code of a gateway's own error answer in the
// configured format: problem+json's code, or Stripe's error object's
// idem_code (docs/problems.md). ok is false when the answer is not in
// that format.
func (pe *productEnv) errorCode(resp *http.Response, body []byte) (code string, ok bool) {
	ct := resp.Header.Get("Content-Type")
	if pe.cfg.errorFormat == "stripe" {
		var e struct {
			Error struct {
				Type     string
				IdemCode string `json:"idem_code"`
			}
		}
		if !strings.HasPrefix(ct, "application/json") || json.Unmarshal(body, &e) != nil || e.Error.Type == "" || e.Error.IdemCode == "" {
			return "", false
		}
		return e.Error.IdemCode, true
	}
	var p struct{ Code string }
	if !strings.HasPrefix(ct, "application/problem+json") || json.Unmarshal(body, &p) != nil || p.Code == "" {
		return "", false
	}
	return p.Code, true
}

// send sends q and records what it got: a 200 of a request every
// configuration it may have run under protects is a result given; a
// replay of a status no configuration of the run stores, a refusal not in
// the configured error format, or one every configuration must make that
// was not made, is a breach. It reports whether the client should back
// off (503, or no answer).
func (pe *productEnv) send(ctx context.Context, q request) (int, bool) {
	status, back, _ := pe.sendCode(ctx, q)
	return status, back
}

// sendCode is send, and the code of the gateway's own error answer ("":
// none: a success, the upstream's answer or a replay).
func (pe *productEnv) sendCode(ctx context.Context, q request) (int, bool, string) {
	doc := map[string]any{"amount": q.amount, "note": q.note}
	switch {
	case q.bodyOther != "":
		doc["request_id"] = q.bodyOther
	case q.spoil == "case":
		doc["Request_Id"] = q.key
	case q.bodyKey || q.spoil != "":
		doc["request_id"] = q.key
	}
	body, _ := json.Marshal(doc)
	switch q.spoil {
	case "bom":
		body = append([]byte("\uFEFF"), body...)
	case "trailing":
		body = append(body, " trailing"...)
	}
	req, err := http.NewRequestWithContext(ctx, q.method, "http://"+q.g.listen+"/", bytes.NewReader(body))
	if err != nil {
		return 0, false, ""
	}
	if strings.HasPrefix(q.path, "//") {
		req.URL.Path = q.path
	} else {
		req.URL.Opaque = q.path
	}
	switch q.ctype {
	case "":
		req.Header.Set("Content-Type", "application/json")
	case "-":
	default:
		req.Header.Set("Content-Type", q.ctype)
	}
	if q.hdrKey != "" {
		req.Header["Idempotency-Key"] = []string{q.hdrKey}
		if q.hdrTwice {
			req.Header.Add("Idempotency-Key", q.hdrKey)
		}
	}
	pe.setTenant(req.Header, q.tenant)
	if q.twice {
		req.Header.Add("X-Tenant-ID", q.tenant+"x")
	}
	hid := id(q.tenant, q.key)
	began := pe.epoch.Load()
	req.Header.Set("X-Check-Key", hid)
	req.Header.Set("X-Check-Route", q.route)
	req.Header.Set("X-Check-Epoch", strconv.Itoa(int(began)))
	for h, on := range map[string]bool{"X-Check-Body-Key": q.bodyKey, "X-Check-Slow": q.slow && !q.slowBefore} {
		if on {
			req.Header.Set(h, "1")
		}
	}
	if q.hdrKey != "" {
		req.Header.Set("X-Check-Header-Key", q.hdrKey)
	}
	if q.slowBefore {
		req.Header.Set("X-Check-Slow", "before")
	}
	if q.retried {
		req.Header.Set("X-Check-Retried", "1") // where a step back of the clock waits (fenceOrder)
	}
	if q.bad != "" {
		req.Header.Set("X-Check-Bad", q.bad)
	}
	switch q.override {
	case "":
	case "_method":
		req.URL.RawQuery = "_method=" + q.overrideTo
	default:
		req.Header.Set(q.override, q.overrideTo)
	}
	if q.status != 0 {
		req.Header.Set("X-Check-Status", strconv.Itoa(q.status))
	}
	if q.inFlight != "" {
		req.Header.Set("X-Check-In-Flight", q.inFlight)
	}
	call := pe.rec.Now()
	req.Header.Set("X-Check-Began", strconv.FormatInt(call, 10))
	resp, err := pe.hc.Do(req)
	if err != nil {
		return 0, true, ""
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, true, ""
	}
	pe.sawSecret(fmt.Sprintf("the %d answer to %s %s", resp.StatusCode, q.method, q.path), got)
	cfgs := pe.configs(began, pe.epoch.Load())
	replayed := resp.Header.Get("Idempotent-Replayed") == "true"
	var code string
	own := resp.Header.Get("X-Check-Upstream") == "" && !replayed
	if own && resp.StatusCode >= 400 {
		var ok bool
		if code, ok = pe.errorCode(resp, got); !ok {
			pe.rec.saw(Violation{"error-format", hid, fmt.Sprintf("the gateway's %d (%s) is not in the %s format: %.120s",
				resp.StatusCode, resp.Header.Get("Content-Type"), pe.cfg.errorFormat, got)})
		}
		pe.did(pe.cfg.errorFormat + " " + code)
	}
	stored := func() bool {
		for _, c := range pe.configs(0, pe.epoch.Load()) {
			if c.route(q.route).answerDisposition(resp.StatusCode, got, c.errorFormat) == "store" {
				return true
			}
		}
		return false
	}
	switch {
	case q.bad != "":
		if resp.StatusCode != http.StatusBadRequest || code != q.bad {
			pe.rec.saw(Violation{"refusal", hid, fmt.Sprintf("%s %s (key header %q, twice %t, body key %q, spoiled %q, override %s %s) got %d %s, not 400 %s (%.80s)",
				q.method, q.path, q.hdrKey, q.hdrTwice, q.bodyOther, q.spoil, q.override, q.overrideTo, resp.StatusCode, code, q.bad, got)})
		}
		pe.did("refused " + q.bad)
		if q.override != "" {
			pe.did("refused override")
		}
	case code == "key_invalid" && (q.hdrKey != "" || q.bodyKey):
		pe.rec.saw(Violation{"refusal", hid, fmt.Sprintf("%s %s with a valid key (header %q, in the body %t) got 400 key_invalid (%.120s)", q.method, q.path, q.hdrKey, q.bodyKey, got)})
	case q.twice && all(cfgs, &q, protects) && resp.StatusCode != http.StatusBadRequest: // the tenant is read for a protected request
		pe.rec.saw(Violation{"tenant", hid, fmt.Sprintf("a request with X-Tenant-ID sent twice got %d, not 400 (%.80s)", resp.StatusCode, got)})
	case all(cfgs, &q, refuses) && resp.StatusCode != http.StatusBadRequest:
		pe.rec.saw(Violation{"require-key", hid, fmt.Sprintf("%s %s without a key the gateway reads got %d, not 400; route %s requires one", q.method, q.path, resp.StatusCode, q.route)})
	case code == "key_required" && !slices.ContainsFunc(cfgs, func(c *productConfig) bool { return c.judge(&q) == refuses }):
		pe.rec.saw(Violation{"require-key", hid, fmt.Sprintf("%s %s got 400 key_required; route %s does not require one (or reads its key)", q.method, q.path, q.route)})
	case !all(cfgs, &q, protects):
	case replayed && isInFlight(resp.StatusCode, got):
		pe.rec.saw(Violation{"status", hid, fmt.Sprintf("a replay of a passed-on downstream key in flight (%d), which no policy stores: the key is UNKNOWN whatever route %s's statuses say (%.80s)",
			resp.StatusCode, q.route, got)})
	case replayed && !stored():
		rt := pe.cfg.route(q.route)
		pe.rec.saw(Violation{"status", hid, fmt.Sprintf("a replay of status %d, which route %s's policy does not store (%s) (%.80s)",
			resp.StatusCode, q.route, rt.answerDisposition(resp.StatusCode, got, pe.cfg.errorFormat), got)})
	case q.afterInFlight && resp.StatusCode != http.StatusOK &&
		!(own && slices.Contains([]string{"outcome_unknown", "key_in_flight", "store_unavailable"}, code)):
		// After a passed-on downstream key in flight the key is UNKNOWN:
		// outcome_unknown, or the result once a lookup settled it (200).
		pe.rec.saw(Violation{"status", hid, fmt.Sprintf("a retry after a passed-on downstream key in flight got %d %s (replayed %t), not %s outcome_unknown (%.80s)",
			resp.StatusCode, code, replayed, pe.cfg.errorFormat, got)})
	case resp.StatusCode == http.StatusOK:
		pe.rec.give(Given{Key: hid, Body: string(got), Replay: replayed, Call: call, Return: pe.rec.Now()})
	}
	pe.did(fmt.Sprintf("answer %d", resp.StatusCode))
	if replayed {
		pe.did("replayed")
	}
	return resp.StatusCode, resp.StatusCode == http.StatusServiceUnavailable, code
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

// anyRoute says whether a configuration of the run has a route named name
// with what f says.
func (pe *productEnv) anyRoute(name string, f func(rt *productRoute) bool) bool {
	return slices.ContainsFunc(pe.configs(0, 2), func(c *productConfig) bool { return f(c.route(name)) })
}

// draw draws one request of the workload.
func (pe *productEnv) draw(rng *rand.Rand) request {
	// Keys of o and p are sent as the API spells them (now and then
	// otherwise); keys of q under a spelling drawn each time, which the
	// fingerprint may take for another request (422).
	ns := []string{"o", "p", "q"}[rng.IntN(3)]
	keys := pe.keys[ns]
	k := rng.IntN(len(keys))
	q := request{tenant: pe.tenants[rng.IntN(len(pe.tenants))], key: keys[k], method: http.MethodPost,
		amount: 1 + k%3, note: "n" + strconv.Itoa(k), g: pe.gs[rng.IntN(len(pe.gs))]}
	q.hdrKey = keyForm(rng, q.key)
	q.route, q.path = "orders", "/v1/orders"
	if ns == "p" {
		q.route, q.path = "payments", "/v1/payments/"+strings.ToLower(q.key)
	} else if k%2 == 0 && pe.anyRoute("orders", func(rt *productRoute) bool { return rt.keyFrom != "" }) {
		// Half the keys of orders are in the body, always (the body
		// counts in the fingerprint), the header sent with it or not.
		q.bodyKey = true
		if rng.IntN(2) == 0 {
			q.hdrKey = ""
		}
		// A key's body keeps one Content-Type, JSON or not: the gateway
		// reads the key whatever it is, as many upstreams do.
		q.ctype = bodyTypes[k/2%len(bodyTypes)]
	}
	if ns == "q" || rng.IntN(10) == 0 {
		sp := spellings(q.path)
		q.path = sp[rng.IntN(len(sp))]
	}
	if rng.IntN(20) == 0 {
		// An override to GET, which no configuration protects: the
		// request is still the POST its route protects.
		q.override, q.overrideTo = overrideForms[rng.IntN(len(overrideForms))], []string{"GET", "get"}[rng.IntN(2)]
	}
	switch r := rng.IntN(100); {
	case r < 5:
		q.status = 401
	case r < 7:
		q.status = 409
	case r < 9:
		q.status = 500
	case r < 11:
		q.status = 400 // stored, or released under the Stripe format
	case r < 13:
		q.slow, q.slowBefore = true, rng.IntN(2) == 0
	case r < 14:
		q.amount++ // the key reused for another request
	case r < 19:
		q.note = "n" + strconv.Itoa(rng.IntN(1000)) // another note: the same request where the fingerprint ignores it
	case r < 21:
		// The effect, then a downstream key in flight passed on: the
		// key is UNKNOWN, and the key's later requests are held to it
		// (send: its answer is never replayed).
		sh := pe.inFlightShapes()
		q.inFlight = sh[rng.IntN(len(sh))]
	}
	return q
}

// drawBad draws a request every configuration of the run refuses with
// 400 before any key is taken: a method not in upper case, a key that is
// not one (quoted with a space at an end, a bare comma, the header twice),
// or, where every configuration reads orders' key from the body, a body
// key that is not the header's or one only a lenient reader reads.
func (pe *productEnv) drawBad(rng *rand.Rand) request {
	q := pe.draw(rng)
	q.route, q.path, q.bodyKey, q.status, q.slow = "orders", "/v1/orders", false, 0, false
	q.hdrKey, q.bad = q.key, "key_invalid"
	switch rng.IntN(6) {
	case 0:
		q.method, q.bad = []string{"post", "Post"}[rng.IntN(2)], "ambiguous_request"
	case 5:
		// A POST overridden to a method the top level protects: read as
		// that method it is the top level's, read as written the
		// orders route's.
		if m := pe.overrideMethod(); m != "" {
			q.override, q.overrideTo, q.bad = overrideForms[rng.IntN(len(overrideForms))], m, "ambiguous_request"
			break
		}
		q.method, q.bad = "post", "ambiguous_request"
	case 1:
		q.hdrKey = `" ` + q.key + `"`
	case 2:
		q.hdrKey = q.key + ",x"
	case 3:
		q.hdrTwice = true
	default:
		if slices.ContainsFunc(pe.configs(0, 2), func(c *productConfig) bool { return c.route("orders").keyFrom == "" }) {
			q.hdrTwice = true
			break
		}
		// A body key that is not the header's, or the key in a body only
		// a lenient reader reads, the header sent or not.
		switch rng.IntN(2) {
		case 0:
			q.bodyOther = q.key + "-other"
		default:
			q.spoil = []string{"case", "bom", "trailing"}[rng.IntN(3)]
			if rng.IntN(2) == 0 {
				q.hdrKey = ""
			}
		}
	}
	return q
}

// run is the workload of one run. Once the clients have taken reloadAt
// steps, one of them reloads the gateways (SIGHUP) to pe.next.
func (pe *productEnv) run(ctx context.Context, w Workload, rec *Recorder, l *Ledger) {
	pe.rec, pe.ledger = rec, l
	defer pe.hc.CloseIdleConnections()
	total := int64(w.Clients * w.Steps)
	pe.reloadAt = total/3 + int64(rand.New(rand.NewPCG(pe.seed, 80)).IntN(int(total/3)+1))
	clientLoop(ctx, w, pe.seed, func(ctx context.Context, rng *rand.Rand) bool {
		if pe.next != nil && w.done.Load() >= pe.reloadAt && pe.reloading.CompareAndSwap(false, true) {
			if err := pe.reload(ctx); err != nil {
				pe.reloadErr = err
			}
			return false
		}
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
			q.hdrKey, q.bodyKey = "", false
			_, back := pe.send(ctx, q)
			return back
		case r < 11:
			q := pe.draw(rng)
			q.route, q.path = "search", []string{"/v1/search", "/V1/Search/"}[rng.IntN(2)]
			_, back := pe.send(ctx, q)
			return back
		case r < 14:
			_, back := pe.send(ctx, pe.drawBad(rng))
			return back
		case r < 23:
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
		q := pe.draw(rng)
		q.retried = q.status == 400 || q.status == 401
		_, back := pe.send(ctx, q)
		if q.retried {
			// The client corrects the request and sends it again under
			// the same key, as a client does after a refusal: where the
			// policy releases the status it runs, where it stores it the
			// status is replayed.
			q.status, q.retried = 0, false
			_, back = pe.send(ctx, q)
		}
		return back
	})
}

// signal sends sig to g's process when it runs.
func (g *gatewayProc) signal(sig os.Signal) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd == nil {
		return false
	}
	select {
	case <-g.done:
		return false
	default:
	}
	return g.cmd.Process.Signal(sig) == nil
}

// reloads is g's idem_config_reloads_total{result} (-1 when its admin
// API does not answer).
func (pe *productEnv) reloads(ctx context.Context, g *gatewayProc, result string) int {
	status, b, err := pe.admin(ctx, g, http.MethodGet, "/metrics", nil, true, "")
	if err != nil || status != http.StatusOK {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, `idem_config_reloads_total{result="`+result+`"} `); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return -1
}

// runningConfig is g's GET /v1/config ("" when it does not answer).
func (pe *productEnv) runningConfig(ctx context.Context, g *gatewayProc) string {
	status, b, err := pe.admin(ctx, g, http.MethodGet, "/v1/config", nil, true, "")
	if err != nil || status != http.StatusOK {
		return ""
	}
	return string(b)
}

// reload reloads both gateways by SIGHUP: first, in some runs, to a file
// they must refuse (each must count a failed reload and keep serving the
// configuration it had: GET /v1/config unchanged), then to pe.next,
// confirmed on each by GET /v1/config (its retention is next's). From
// before the file is written until then, a request may run under either
// configuration (epoch 1).
func (pe *productEnv) reload(ctx context.Context) error {
	for _, kind := range pe.invalid {
		if err := pe.reloadInvalid(ctx, kind); err != nil {
			return err
		}
	}
	pe.epoch.Store(1)
	if err := os.WriteFile(pe.file, []byte(pe.next.file()), 0o644); err != nil {
		return err
	}
	retention := func(doc string) string {
		var c struct {
			Settings struct{ Retention struct{ Value string } }
		}
		_ = json.Unmarshal([]byte(doc), &c)
		return c.Settings.Retention.Value
	}
	for _, g := range pe.gs {
		deadline := time.Now().Add(20 * time.Second)
		for {
			// Under the file lock, so that no gateway restarts between
			// the look and the signal: a SIGHUP before its handler is
			// installed would end the process. One whose admin API
			// answers has it.
			pe.fileMu.Lock()
			doc := pe.runningConfig(ctx, g)
			if doc != "" && retention(doc) != pe.next.retention.String() {
				g.signal(syscall.SIGHUP) // again: a gateway restarted meanwhile on the old file is on the new one; one still reloading ignores it
			}
			pe.fileMu.Unlock()
			if retention(doc) == pe.next.retention.String() {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				pe.rec.saw(Violation{"reload", "", fmt.Sprintf("gateway %s did not apply a valid configuration within 20s of SIGHUP (GET /v1/config: %.200s)",
					g.listen, doc)})
				return nil
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}
	pe.epoch.Store(2)
	pe.did("reload applied")
	return nil
}

// reloadInvalid writes the file broken the way kind says, sends SIGHUP,
// and checks that every running gateway refused it and still runs what it
// ran; then puts the file back.
func (pe *productEnv) reloadInvalid(ctx context.Context, kind string) error {
	pe.fileMu.Lock()
	defer pe.fileMu.Unlock()
	type before struct {
		failures, successes int
		config              string
	}
	was := map[*gatewayProc]before{}
	missed := func(g *gatewayProc, why string) {
		pe.mu.Lock()
		defer pe.mu.Unlock()
		pe.missed[kind] = append(pe.missed[kind], fmt.Sprintf("gateway %s %s", g.listen, why))
	}
	for _, g := range pe.gs {
		if b := (before{pe.reloads(ctx, g, "failure"), pe.reloads(ctx, g, "success"), pe.runningConfig(ctx, g)}); b.failures >= 0 && b.config != "" {
			was[g] = b
		} else {
			missed(g, "was not running (its admin API gave no GET /v1/config, or no idem_config_reloads_total in /metrics)")
		}
	}
	if err := os.WriteFile(pe.file, []byte(pe.cfg.invalidFile(kind)), 0o644); err != nil {
		return err
	}
	for g, b := range was {
		if !g.signal(syscall.SIGHUP) {
			missed(g, "exited before its SIGHUP")
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		for pe.reloads(ctx, g, "failure") <= b.failures && pe.reloads(ctx, g, "success") <= b.successes {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("gateway %s counted no reload within 10s of SIGHUP to the broken file (%s)", g.listen, kind)
			}
			sleep(ctx, 20*time.Millisecond)
		}
		// Refused: counted as a failure, not a success, and the running
		// configuration unchanged. Anything else fails the run.
		var not []string
		if n := pe.reloads(ctx, g, "success"); n > b.successes {
			not = append(not, fmt.Sprintf("counted a successful reload (%d, was %d)", n, b.successes))
		}
		if n := pe.reloads(ctx, g, "failure"); n <= b.failures {
			not = append(not, fmt.Sprintf("counted no failed reload (%d, was %d)", n, b.failures))
		}
		if now := pe.runningConfig(ctx, g); now != b.config {
			not = append(not, fmt.Sprintf("runs another configuration: %.200s", now))
		}
		if not != nil {
			pe.rec.saw(Violation{"reload", "", fmt.Sprintf("gateway %s did not refuse the broken reload file (%s) it must refuse: %s",
				g.listen, kind, strings.Join(not, "; "))})
			continue
		}
		pe.mu.Lock()
		pe.refused[kind]++
		pe.mu.Unlock()
		pe.did("reload refused " + kind)
	}
	return os.WriteFile(pe.file, []byte(pe.cfg.file()), 0o644)
}

// unrefused are the breaches of a run whose broken reload files were not
// all refused: each of pe.invalid must have been refused by a gateway at
// least (at most one is down at a time, killed by a nemesis), or the run
// forced a file no gateway was tested on.
func (pe *productEnv) unrefused() []Violation {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	var out []Violation
	for _, kind := range pe.invalid {
		if pe.refused[kind] == 0 {
			why := pe.missed[kind]
			switch {
			case pe.epoch.Load() == 0:
				why = []string{"the run never reloaded"}
			case len(why) < len(pe.gs):
				why = append(why, "the gateways that got it did not refuse it")
			}
			out = append(out, Violation{"reload", "", fmt.Sprintf("no gateway refused the broken reload file (%s) the run forced: %s",
				kind, strings.Join(why, "; "))})
		}
	}
	return out
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
	pe.sawSecret(method+" "+path+" (admin)", b)
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
	path := "/v1/keys/" + pe.tenantSegment(tenant) + "/" + url.PathEscape(key)
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
	if view.State == "UNKNOWN" && rng.IntN(3) == 0 {
		// The operator asks the route's lookup (POST .../reconcile): the
		// key settles by the ledger's word, which the invariants hold
		// like a request's reconciliation; without a lookup, 409.
		if !authorised {
			status, _, err = pe.admin(ctx, g, http.MethodPost, path+"/reconcile", nil, auth, origin)
			refused("POST reconcile", status, err)
			return
		}
		status, b, _ = pe.admin(ctx, g, http.MethodPost, path+"/reconcile", nil, true, "")
		var out struct{ Verdict string }
		_ = json.Unmarshal(b, &out)
		pe.did(fmt.Sprintf("admin reconcile %d %s", status, out.Verdict))
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
	if pe.reloadErr != nil {
		return nil, pe.reloadErr
	}
	seen = append(seen, pe.unrefused()...)
	fc := pe.final()
	pe.clock.arm(0) // the final phase's rules count leases on a clock that does not move
	pe.probeStatuses(ctx, tenant)
	orders := fc.route("orders")
	send := func(i int, g *gatewayProc, slow bool) {
		pe.send(ctx, request{tenant: tenant, key: zs[i], route: "orders", path: "/v1/orders", method: http.MethodPost, hdrKey: zs[i],
			slow: slow, amount: 1, note: "z" + strconv.Itoa(i), g: g})
	}
	ret := fc.retention
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
	lease := max(fc.lease, orders.lease)
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
	pe.probeAdmin(ctx, tenant, zs[0]) // listed UNKNOWN, or settled by the takeover or a lookup
	// The operator reconciles zs[2], abandoned and not retried (POST
	// .../reconcile): where its route has a lookup, it settles by the
	// ledger's word, and the retry below is held to it.
	status, b, _ := pe.admin(ctx, pe.gs[0], http.MethodPost, "/v1/keys/"+pe.tenantSegment(tenant)+"/"+url.PathEscape(zs[2])+"/reconcile", nil, true, "")
	var out struct{ Verdict string }
	_ = json.Unmarshal(b, &out)
	pe.did(fmt.Sprintf("admin reconcile %d %s", status, out.Verdict))
	// Past the response's retention: still UNKNOWN (the invariants
	// bound its record's life from the first request only).
	sleep(ctx, time.Until(marked.Add(ret+300*time.Millisecond)))
	for i := range 3 {
		send(i, pe.gs[1], false)
	}
	// Past the key retention too, on the Redis server's clock where it can
	// be moved: an UNKNOWN key is kept until settled, never forgotten by
	// time, and its retry does not run it again (the checker holds a key
	// to its life only once a client got its result: a COMPLETED one may
	// run again now).
	if pe.store.cur.Load().clocked {
		late.Wait()
		if err := pe.clock.moveFinal(fc.life(orders) + time.Second); err != nil {
			return nil, err
		}
		pe.did("clock past every life")
		for i := range zs {
			send(i, pe.gs[1], false)
		}
	}
	return seen, nil
}

// probeStatuses sends, on each protected route, a request the upstream
// refuses with each status a policy decides on, then the corrected
// request under the same key, as a client does: where the policy stores
// the status it is replayed, where it releases the key the request runs,
// and send holds the replay to the policy. And a 503 that comes after the
// effect: a policy that releases it runs the effect twice, so it is sent
// only where no configuration's route declares its 503 released. And the
// effect followed by each passed-on downstream key in flight, which no
// route's statuses decide. Every run does it, so that a status policy's
// slip does not wait for the workload to draw the status.
func (pe *productEnv) probeStatuses(ctx context.Context, tenant string) {
	for i, status := range []int{400, 401, 409, 500, 503} {
		for _, ns := range []string{"y", "py"} {
			key := pe.keys[ns][i]
			q := request{tenant: tenant, key: key, route: "orders", path: "/v1/orders", method: http.MethodPost, hdrKey: key,
				status: status, amount: 1, note: ns, g: pe.gs[i%len(pe.gs)]}
			if ns == "py" {
				q.route, q.path = "payments", "/v1/payments/"+strings.ToLower(key)
			}
			if status == http.StatusServiceUnavailable && slices.ContainsFunc(pe.configs(0, pe.epoch.Load()), func(c *productConfig) bool {
				return c.route(q.route).disposition(status, c.errorFormat) == "release"
			}) {
				continue
			}
			pe.send(ctx, q)
			q.status = 0
			pe.send(ctx, q)
		}
	}
	// The effect, then a downstream key in flight passed on, on keys
	// after the statuses': whatever the route's statuses say of 409 or
	// 429 the key is UNKNOWN, so the retry gets outcome_unknown (or the
	// lookup's result), never the answer replayed nor the effect again.
	// A gateway's own key_in_flight or store_unavailable says nothing of
	// the key's state: sent again, a few times.
	for j, shape := range pe.inFlightShapes() {
		i := 5 + j
		for _, ns := range []string{"y", "py"} {
			key := pe.keys[ns][i]
			q := request{tenant: tenant, key: key, route: "orders", path: "/v1/orders", method: http.MethodPost, hdrKey: key,
				inFlight: shape, amount: 1, note: ns, g: pe.gs[i%len(pe.gs)]}
			if ns == "py" {
				q.route, q.path = "payments", "/v1/payments/"+strings.ToLower(key)
			}
			pe.send(ctx, q)
			pe.did("probe in flight " + shape)
			q.inFlight, q.afterInFlight = "", true
			for range 5 {
				status, _, code := pe.sendCode(ctx, q)
				pe.did(fmt.Sprintf("probe in flight retry %d %s", status, code))
				if code != "key_in_flight" && code != "store_unavailable" {
					break
				}
				sleep(ctx, 200*time.Millisecond)
			}
		}
	}
}

// probeAdmin tries to change key, which exists, through the admin API
// from a foreign origin (delete, force-delete, resolve, reconcile) and, where the
// configuration has an admin token, without it: each must be refused.
// Every run does it, so that a missing check does not wait for the
// workload to draw an unauthorised call on a key that exists.
func (pe *productEnv) probeAdmin(ctx context.Context, tenant, key string) {
	g := pe.gs[1]
	path := "/v1/keys/" + pe.tenantSegment(tenant) + "/" + url.PathEscape(key)
	status, b, err := pe.admin(ctx, g, http.MethodGet, path, nil, true, "")
	var view struct{ Fence int64 }
	if err != nil || status != http.StatusOK || json.Unmarshal(b, &view) != nil {
		pe.did(fmt.Sprintf("admin probe skipped: GET %d", status))
		return
	}
	type call struct {
		method, path string
		body         any
		auth         bool
		origin       string
	}
	resolve := map[string]any{"fence": view.Fence, "outcome": "not_executed"}
	calls := []call{{http.MethodDelete, path, nil, true, "http://evil.example"},
		{http.MethodDelete, path + "?force=true", nil, true, "http://evil.example"},
		{http.MethodPost, path + "/resolve", resolve, true, "http://evil.example"},
		{http.MethodPost, path + "/reconcile", nil, true, "http://evil.example"}}
	if pe.cfg.adminToken != "" {
		calls = append(calls, call{http.MethodDelete, path + "?force=true", nil, false, ""}, call{http.MethodPost, path + "/resolve", resolve, false, ""},
			call{http.MethodPost, path + "/reconcile", nil, false, ""})
	}
	for _, c := range calls {
		status, _, err := pe.admin(ctx, g, c.method, c.path, c.body, c.auth, c.origin)
		pe.did(fmt.Sprintf("admin probe %d", status))
		if err == nil && status < 300 {
			pe.rec.saw(Violation{"admin", id(tenant, key), fmt.Sprintf("%s %s (origin %q, token %t) got %d: it changed the key", c.method, c.path, c.origin, c.auth, status)})
		}
	}
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
	status, b, err := pe.admin(ctx, g, http.MethodGet, "/v1/keys/"+seg+"/"+url.PathEscape(key), nil, true, "")
	if err != nil || status != http.StatusOK {
		return ""
	}
	var view struct{ State string }
	_ = json.Unmarshal(b, &view)
	return view.State
}
