package check

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	randv2 "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/faultproxy"
	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/redistopo"
	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// The store of a product run: each run draws the form of its store URL
// from its seed, among the forms docs/reference/config.md lists for
// --store, from a generator of its own (so that a seed's other draws stay
// what they were). The servers are the Env's, started once: a Redis (TCP
// behind a fault proxy, and a Unix socket), a Redis with a password
// (behind a proxy), the harness's PostgreSQL (behind a proxy, a schema
// per run), and a Sentinel and a Cluster, started when a run first draws
// them. The faults of the store act on the run's: storePause stops one of
// its Redis servers (never PostgreSQL, which the harness did not start),
// storeDrop drops the replies of one of its proxies (none in front of a
// Unix socket or a topology).

// productRedisPassword is the password of the Redis the password form
// names (a test password): no answer of a gateway and no line of its log
// may show it (violation `secret`).
const productRedisPassword = "chk-s3cret-7f3a9e"

// storeKinds are the forms a run draws from: Redis alone in seven runs of
// nine, since several product mutations are in its scripts. Two in three
// runs on a single Redis over TCP without TLS, a Unix socket or layered
// name the one with a password.
var storeKinds = []string{"redis", "redis", "redis", "rediss", "unix", "sentinel", "cluster", "postgres", "layered"}

// storeForm is the store of one run.
type storeForm struct {
	kind      string // of storeKinds, "+password" where the URL has one
	url       string
	nearCache bool
	password  string              // the Redis password in url ("": none)
	redis     []*redisproc.Server // the Redis data nodes url names: storePause stops one
	proxies   []*faultproxy.Proxy // the proxies between the gateways and its servers: storeDrop drops the replies of one
	clocked   bool                // its Redis is one of the private servers, whose clock the clock faults move
}

// productStores are the product check's store servers.
type productStores struct {
	t        *testing.T
	redis    *redisproc.Server // on TCP behind rp, and on the Unix socket sock
	rp       *faultproxy.Proxy
	tp       *faultproxy.Proxy // in front of redis's TLS port
	tls      productTLS        // its certificate's files; the gateways trust its CA (SSL_CERT_FILE)
	sock     string
	auth     *redisproc.Server // with --requirepass productRedisPassword, behind ap, and on the Unix socket authSock
	authSock string
	ap       *faultproxy.Proxy
	pg       *pgx.ConnConfig   // the harness's PostgreSQL
	pgp      *faultproxy.Proxy // in front of it
	tag      string            // this Env's part of a schema's name: another process may run the same seeds
	schemas  []string          // created by runs, dropped when t ends
	sentinel *redistopo.Sentinel
	cluster  *redistopo.Cluster
	cur      atomic.Pointer[storeForm]
	logs     []*logBuffer // the gateways' stderr, per run
}

func newProductStores(t *testing.T, clockEnv []string) *productStores {
	// A Unix socket's path has at most 107 bytes: not under t.TempDir().
	dir, err := os.MkdirTemp("", "idem-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ps := &productStores{t: t, sock: filepath.Join(dir, "redis.sock"), authSock: filepath.Join(dir, "auth.sock"), tag: strings.ToLower(rand.Text()[:6])}
	ps.tls = newProductTLS(t, dir)
	tlsAddr := freeAddr(t)
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	s, err := redisproc.Start(t.Context(), redisproc.Config{Dir: filepath.Join(t.TempDir(), "redis"), Env: clockEnv,
		Args: append([]string{"--appendonly", "yes", "--appendfsync", "always", "--unixsocket", ps.sock, "--unixsocketperm", "700"},
			ps.tls.args(tlsPort)...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	ps.redis, ps.rp, ps.tp = s, proxyTo(t, s.Addr), proxyTo(t, tlsAddr)
	auth, err := redisproc.Start(t.Context(), redisproc.Config{Dir: filepath.Join(t.TempDir(), "redis-auth"), Password: productRedisPassword, Env: clockEnv,
		Args: []string{"--appendonly", "yes", "--appendfsync", "always", "--requirepass", productRedisPassword,
			"--unixsocket", ps.authSock, "--unixsocketperm", "700"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(auth.Kill)
	ps.auth, ps.ap = auth, proxyTo(t, auth.Addr)
	if ps.pg, err = pgx.ParseConfig(testenv.DatabaseURL()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, ps.pg)
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL at "+testenv.DatabaseURL(), err)
	}
	conn.Close(ctx)
	ps.pgp = proxyTo(t, net.JoinHostPort(ps.pg.Host, strconv.Itoa(int(ps.pg.Port))))
	t.Cleanup(ps.dropSchemas)
	return ps
}

// dropSchemas drops the schemas the runs made.
func (ps *productStores) dropSchemas() {
	if len(ps.schemas) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, ps.pg)
	if err != nil {
		ps.t.Logf("dropping the product runs' schemas: %v", err)
		return
	}
	defer conn.Close(ctx)
	for _, s := range ps.schemas {
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
			ps.t.Logf("drop schema %s: %v", s, err)
		}
	}
}

// draw draws the store of the run of seed and makes it the current one.
func (ps *productStores) draw(seed uint64) *storeForm {
	rng := randv2.New(randv2.NewPCG(seed, 81))
	f := &storeForm{kind: storeKinds[rng.IntN(len(storeKinds))]}
	db := strconv.Itoa(rng.IntN(16))
	redisTCP, unix, redis, proxy := "redis://"+ps.rp.Addr(), "unix://"+ps.sock, ps.redis, ps.rp
	forced := seed%productProfiles == 0 // profile 0's store has a password, so that every short campaign looks for it
	if forced && f.kind != "unix" && f.kind != "layered" {
		f.kind = "redis"
	}
	if (f.kind == "redis" || f.kind == "unix" || f.kind == "layered") && (rng.IntN(3) > 0 || forced) {
		redisTCP, unix, redis, proxy = "redis://:"+productRedisPassword+"@"+ps.ap.Addr(), "unix://:"+productRedisPassword+"@"+ps.authSock, ps.auth, ps.ap
		f.kind, f.password = f.kind+"+password", productRedisPassword
	}
	var opts []string // a Redis form's options
	if rng.IntN(2) == 0 {
		// Not ending in ':', which would end a plain YAML scalar where the
		// URL ends with it (the file quotes nothing).
		opts = append(opts, "prefix=chk"+strconv.FormatUint(seed, 36)+"-")
	}
	prefixOnly := strings.Join(opts, "&") // what the layered store's Redis takes
	switch {
	case rng.IntN(4) == 0:
		opts, f.nearCache = append(opts, "near_cache=on"), true
	case rng.IntN(3) == 0:
		opts = append(opts, "client=go-redis") // the default is rueidis
	}
	if rng.IntN(3) == 0 {
		opts = append(opts, "coalesce=off")
	}
	query := func(q string) string {
		if q == "" {
			return ""
		}
		return "?" + q
	}
	schema := fmt.Sprintf("chk_%s_%d", ps.tag, seed)
	pgURL := fmt.Sprintf("postgres://%s@%s/%s?schema=%s", ps.pg.User, ps.pgp.Addr(), ps.pg.Database, schema)
	switch strings.TrimSuffix(f.kind, "+password") {
	case "redis":
		f.url, f.redis, f.proxies = redisTCP+"/"+db+query(strings.Join(opts, "&")), []*redisproc.Server{redis}, []*faultproxy.Proxy{proxy}
	case "rediss": // TLS to the first Redis's TLS port, behind its proxy
		f.url, f.redis, f.proxies = "rediss://"+ps.tp.Addr()+"/"+db+query(strings.Join(opts, "&")), []*redisproc.Server{ps.redis}, []*faultproxy.Proxy{ps.tp}
	case "unix": // no proxy: only SIGSTOP
		f.url, f.redis = unix+"?"+strings.Join(append([]string{"db=" + db}, opts...), "&"), []*redisproc.Server{redis}
	case "sentinel": // a primary without replicas under one Sentinel: a pause fails nothing over
		if ps.sentinel == nil {
			ps.sentinel = redistopo.StartSentinel(ps.t, 0, 1)
		}
		f.url = "redis-sentinel://" + strings.Join(ps.sentinel.SentinelAddrs(), ",") + "/" + redistopo.MasterName + "/" + db + query(strings.Join(opts, "&"))
		f.redis = []*redisproc.Server{ps.sentinel.Primary}
	case "cluster": // three primaries without replicas: a paused one is not failed over
		if ps.cluster == nil {
			ps.cluster = redistopo.StartCluster(ps.t, 3, 0)
		}
		f.url = "redis-cluster://" + strings.Join(ps.cluster.Addrs(), ",") + query(strings.Join(opts, "&"))
		f.redis = ps.cluster.Nodes
	case "postgres":
		f.url, f.proxies = pgURL, []*faultproxy.Proxy{ps.pgp}
		f.nearCache = false
	case "layered": // Redis in front of PostgreSQL: its Redis takes no client options
		f.url = redisTCP + "/" + db + query(prefixOnly) + "+" + pgURL
		f.redis, f.proxies = []*redisproc.Server{redis}, []*faultproxy.Proxy{proxy, ps.pgp}
		f.nearCache = false
	}
	f.clocked = len(f.redis) == 1 && (f.redis[0] == ps.redis || f.redis[0] == ps.auth)
	if f.proxies != nil && f.proxies[len(f.proxies)-1] == ps.pgp {
		ps.schemas = append(ps.schemas, schema)
	}
	for _, l := range ps.logs {
		l.Reset()
	}
	ps.cur.Store(f)
	return f
}

// logBuffer is a gateway's stderr, written by its processes one after
// the other and read by the harness.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// watch captures g's stderr for the secret check.
func (ps *productStores) watch(g *gatewayProc) {
	l := &logBuffer{}
	ps.logs = append(ps.logs, l)
	g.log = l
}

// keep writes the gateways' logs of the run (gateway-N.log) into dir.
func (ps *productStores) keep(dir string) error {
	for i, l := range ps.logs {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("gateway-%d.log", i)), []byte(l.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// secret is a violation when text, what a gateway showed (where says
// where), holds the run's Redis password.
func (ps *productStores) secret(where string, text []byte) []Violation {
	f := ps.cur.Load()
	if f == nil || f.password == "" || !bytes.Contains(text, []byte(f.password)) {
		return nil
	}
	i := bytes.Index(text, []byte(f.password))
	return []Violation{{"secret", "", fmt.Sprintf("%s shows the store's password: ...%s...", where, text[max(0, i-80):min(len(text), i+len(f.password)+40)])}}
}

// sawSecret records a secret violation in text as the run sees it.
func (pe *productEnv) sawSecret(where string, text []byte) {
	if v := pe.store.secret(where, text); v != nil && pe.rec != nil {
		pe.rec.saw(v...)
	}
}

// finishStore is finish, then the store's own checks: no gateway's log,
// and no answer of its admin API, shows the store's password. With a
// near cache, an admin delete may be seen up to staleness after it
// returned (a gateway's cached copy of the record lives until the
// invalidation arrives): the history counts it until then, as the model
// does (Options.Staleness).
func (pe *productEnv) finishStore(ctx context.Context) ([]Violation, error) {
	pe.did("store " + pe.store.cur.Load().kind)
	seen, err := pe.finish(ctx)
	if err != nil {
		return nil, err
	}
	for _, g := range pe.gs {
		for _, path := range []string{"/v1/config", "/metrics", "/readyz", "/healthz", "/v1/keys?state=unknown&limit=1000"} {
			pe.admin(ctx, g, http.MethodGet, path, nil, true, "") // admin checks each answer
		}
	}
	for i, l := range pe.store.logs {
		seen = append(seen, pe.store.secret(fmt.Sprintf("the log of gateway %s", pe.gs[i].listen), []byte(l.String()))...)
	}
	if f := pe.store.cur.Load(); f.nearCache {
		pe.rec.widenExternal(int64(staleness))
	}
	return seen, nil
}

// widenExternal counts every external operation as running until d after
// it returned.
func (r *Recorder) widenExternal(d int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.ext {
		r.ext[i].Return = satAdd(r.ext[i].Return, d)
		r.ext[i].In.Return = r.ext[i].Return
	}
}

// storePause stops one Redis server of the run's store with SIGSTOP
// (Pause); a run on PostgreSQL alone has none.
type storePause struct{ pe *productEnv }

// Name implements Nemesis.
func (storePause) Name() string { return "pause the store's redis" }

// Inject implements Nemesis.
func (n storePause) Inject(_ context.Context, rng *randv2.Rand) (func() error, error) {
	f := n.pe.store.cur.Load()
	if len(f.redis) == 0 {
		n.pe.did("fault none: no redis to pause")
		return func() error { return nil }, nil
	}
	s := f.redis[0]
	if len(f.redis) > 1 {
		s = f.redis[rng.IntN(len(f.redis))]
	}
	if err := s.Pause(); err != nil {
		return nil, err
	}
	n.pe.did("fault pause redis")
	return s.Resume, nil
}

// storeDrop drops every second reply of one of the run's store's proxies
// and cuts its connection (Net, DropEverySecond); a Unix socket and a
// topology have none.
type storeDrop struct{ pe *productEnv }

// Name implements Nemesis.
func (storeDrop) Name() string { return "drop every second reply of the store" }

// Inject implements Nemesis.
func (n storeDrop) Inject(_ context.Context, rng *randv2.Rand) (func() error, error) {
	f := n.pe.store.cur.Load()
	if len(f.proxies) == 0 {
		n.pe.did("fault none: no proxy in front of the store")
		return func() error { return nil }, nil
	}
	p := f.proxies[0]
	if len(f.proxies) > 1 {
		p = f.proxies[rng.IntN(len(f.proxies))]
	}
	p.SetMode(faultproxy.DropEverySecond)
	n.pe.did(map[bool]string{true: "fault drop postgres replies", false: "fault drop redis replies"}[p == n.pe.store.pgp])
	return func() error {
		p.SetMode(faultproxy.Forward)
		return nil
	}, nil
}
