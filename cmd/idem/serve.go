package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// serveFlags are the values of idem serve's flags. resolveServe returns
// them only once the command line, the IDEM_ variables and the config
// file have all been applied (resolveFlags), so that no value is read
// before it is final: three were once copied before the file was applied,
// and a file's store: line was ignored (issue 31, item 1).
type serveFlags struct {
	config, checkConfig                                           string
	listen, upstream, store                                       string
	noMigrate                                                     bool
	storeTimeout, lease, retention, keyRetention                  time.Duration
	repeatability, requireKey, allowAnonymous, failOpen           bool
	methods, tenantHeader, tenantFrom                             string
	maxBody, maxResponse, memoryLimit                             byteSize
	memoryTenantShare, reconcileRate                              float64
	readTimeout, idleTimeout, wait, upstreamTimeout               time.Duration
	maxConns, reconcileConcurrency, mismatchStatus                int
	takeover, reconcileURL, reconcileToken                        string
	reconcileTimeout, reconcileEvery, shutdownTimeout, drainDelay time.Duration
	admin, adminToken, adminTokensFile, adminHosts                string
	tlsCert, tlsKey, adminTLSCert, adminTLSKey, adminClientCA     string
	errorFormat, replayHeaders                                    string
	adminInsecure, accessLog                                      bool
	logFormat, logLevel, otlp, otlpProtocol                       string
}

// defineServeFlags defines every flag of idem serve: the one place to add
// one. Each is also a config file key and an IDEM_ variable, but for the
// commandLineOnly ones.
func defineServeFlags(fs *flag.FlagSet, f *serveFlags) {
	f.maxBody, f.maxResponse, f.memoryLimit = 1<<20, 1<<20, 256<<20
	fs.StringVar(&f.config, "config", "", "a YAML file of settings (the flags' names as keys) and routes, reloaded on SIGHUP; a flag given on the command line, then its IDEM_ variable, wins over the file (docs/configuration.md)")
	fs.Var((*checkConfigMode)(&f.checkConfig), "check-config", "print the effective configuration, each value with its source (flag, env, file:line, default), secrets hidden, and exit: 0, or 2 with the error; --check-config=json prints it as JSON")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address of the gateway, host:port")
	fs.StringVar(&f.upstream, "upstream", "", "URL of the HTTP API behind the gateway (required)")
	fs.StringVar(&f.store, "store", "memory", "where keys live: "+gateway.StoreURIHelp)
	fs.BoolVar(&f.noMigrate, "no-migrate", false, "(a PostgreSQL --store only) do not create or update the PostgreSQL store's tables (which needs the CREATE privilege); check that the schema of --store's ?schema= is current instead, and fail naming 'idem migrate' (with the same --store) when it is not")
	fs.DurationVar(&f.storeTimeout, "store-timeout", idem.DefaultStoreTimeout, "bound of every store call, the store client's retries included: a request whose key the store does not answer for by then gets 503 store_unavailable and does not run; a result it does not store by then is held in memory and retried")
	fs.DurationVar(&f.lease, "lease", 30*time.Second, "how long a request owns its key before a retry may take it over, renewed while it runs")
	fs.DurationVar(&f.retention, "retention", 24*time.Hour, "how long a finished response is replayed")
	fs.DurationVar(&f.keyRetention, "key-retention", 0, "how long, from completion, a key is remembered: past --retention the response is dropped and a compact tombstone (fingerprint, status, fence, completion time) answers retries with 410 key_expired instead of running them again; above 0, longer than --retention; 0: the key ends with its response (a reload cannot turn it off once started with one: restart)")
	fs.BoolVar(&f.repeatability, "repeatability", false, "understand OASIS Repeatable Requests (Azure's SDKs send them): Repeatability-Request-ID as a key, with Repeatability-First-Sent; a request first sent longer ago than keys are kept gets 412 first_sent_stale; answers carry Repeatability-Result")
	fs.StringVar(&f.methods, "methods", "POST,PATCH", "comma-separated methods that idempotency applies to (at least one; GET protects HEAD too); others pass through")
	fs.BoolVar(&f.requireKey, "require-key", false, "answer 400 to a request of those methods without an Idempotency-Key")
	fs.StringVar(&f.tenantHeader, "tenant-header", "", "trust this request header as the tenant (e.g. X-Tenant-ID); an alias of --tenant-from header:NAME")
	fs.StringVar(&f.tenantFrom, "tenant-from", "", gateway.TenantSourcesHelp+"; a request with none of them gets 400 tenant_missing (default: authorization; with --error-format stripe: authorization,header:Stripe-Account)")
	fs.BoolVar(&f.allowAnonymous, "allow-anonymous", false, "let requests without any --tenant-from credentials share one tenant (default: 400 tenant_missing)")
	fs.Var(&f.maxBody, "max-body", "largest request body (bytes, or with KiB/MiB/GiB); larger gets 413")
	fs.Var(&f.maxResponse, "max-response", "largest response kept for replay (bytes, or with KiB/MiB/GiB); a larger one reaches the client once and its retries get 422 not_replayable")
	fs.Var(&f.memoryLimit, "memory-limit", "bound of the memory store (bytes, or with KiB/MiB/GiB); when stored results fill it, new keys get 503 store_full")
	fs.Float64Var(&f.memoryTenantShare, "memory-tenant-share", memstore.DefaultTenantShare, "fraction of --memory-limit one tenant's stored results may take; past it that tenant's new keys get 503 store_full, the other tenants' do not (1: no per-tenant bound)")
	fs.DurationVar(&f.readTimeout, "read-timeout", gateway.DefaultReadTimeout, "longest time to read a whole request, body included")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", gateway.DefaultIdleTimeout, "close a keep-alive connection idle this long")
	fs.IntVar(&f.maxConns, "max-conns", gateway.DefaultMaxConns(), "most client connections open at once (default: the open-file limit less 1024); more wait to be accepted")
	fs.DurationVar(&f.wait, "wait", 0, "wait up to this long for an in-flight request with the same key and replay it, instead of 409")
	fs.BoolVar(&f.failOpen, "fail-open", false, "when the store is down, pass requests through without idempotency (default: 503)")
	fs.DurationVar(&f.upstreamTimeout, "upstream-timeout", 30*time.Second, "answer 504 when the upstream takes longer; the request was sent, so the key turns UNKNOWN")
	fs.StringVar(&f.takeover, "takeover", "unknown", "a key whose previous attempt's lease ended (crash, stall): unknown (reconcile it, else UNKNOWN) or run (send it again with Idempotency-Previous-Fence)")
	fs.StringVar(&f.reconcileURL, "reconcile-url", "", "the upstream's lookup of a request by key, a URL template with {key} (and {tenant}, {fence}): see docs/reconcile.md")
	fs.StringVar(&f.reconcileToken, "reconcile-token", "", "bearer token sent to --reconcile-url")
	fs.DurationVar(&f.reconcileTimeout, "reconcile-timeout", 5*time.Second, "bound of one --reconcile-url lookup; past it the key stays UNKNOWN")
	fs.DurationVar(&f.reconcileEvery, "reconcile-every", 0, "reconcile every UNKNOWN key in the background at this interval (needs --reconcile-url); 0: only when a retry comes")
	fs.Float64Var(&f.reconcileRate, "reconcile-rate", idem.DefaultReconcileRate, "most lookups the background sweep starts per second")
	fs.IntVar(&f.reconcileConcurrency, "reconcile-concurrency", idem.DefaultReconcileConcurrency, "most lookups the background sweep has in flight at once; a key whose lookup failed is asked again after a backoff (30s, doubling to 30m)")
	fs.StringVar(&f.admin, "admin", "127.0.0.1:9090", "address of the admin API (/healthz, /readyz, /metrics, /v1/keys, /v1/stats, the console at /ui/); empty turns it off")
	fs.StringVar(&f.adminToken, "admin-token", "", "bearer token the admin key API requires; without one the admin API must listen on loopback")
	fs.BoolVar(&f.adminInsecure, "admin-insecure", false, "allow --admin on a non-loopback address without --admin-token, --admin-tokens-file or --admin-client-ca (anyone who reaches it can read and delete keys); refused (exit 2) where it allows nothing: with one of them, or on a loopback --admin")
	fs.StringVar(&f.adminTokensFile, "admin-tokens-file", "", "a file of admin tokens, one 'name role token' a line (role read-only or read-write), read again on SIGHUP; with --admin-token (read-write, named admin-token)")
	fs.StringVar(&f.adminHosts, "admin-hosts", "", "comma-separated names (name, or name:port) the admin API answers besides its --admin address and loopback on its port, e.g. the name of a proxy in front of it; any other Host or Origin is refused (in the config file, a list)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM file of the proxy's certificate (and its chain): the proxy then speaks TLS (1.2 at least, HTTP/1.1) only; with --tls-key; both read again on SIGHUP")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM file of the key of --tls-cert")
	fs.StringVar(&f.adminTLSCert, "admin-tls-cert", "", "PEM file of the admin API's certificate (and its chain): the admin API then speaks TLS only; with --admin-tls-key; both read again on SIGHUP")
	fs.StringVar(&f.adminTLSKey, "admin-tls-key", "", "PEM file of the key of --admin-tls-cert")
	fs.StringVar(&f.adminClientCA, "admin-client-ca", "", "PEM file of the CAs whose client certificates the admin API requires (mTLS; needs --admin-tls-cert), read again on SIGHUP; without a token such a certificate authenticates (read-write, audited by its subject) and the admin API may listen beyond loopback")
	fs.StringVar(&f.errorFormat, "error-format", "problem", "shape of error answers: problem (application/problem+json, RFC 9457) or stripe (Stripe's error object, statuses and retry headers, for Stripe's SDKs); see docs/problems.md")
	fs.IntVar(&f.mismatchStatus, "mismatch-status", 0, "status of key_mismatch (a key reused for another request); 0: the format's, 422 for problem, 400 for stripe")
	fs.StringVar(&f.replayHeaders, "replay-headers", strings.Join(gateway.DefaultReplayHeaders, ","), "comma-separated upstream response headers a replay carries, besides Content-Type, Content-Encoding, Location, Content-Language, Content-Disposition and ETag; Set-Cookie, Authorization and hop-by-hop headers are refused; a replay always echoes Idempotency-Key")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&f.accessLog, "access-log", false, "log one line per proxied request (\"idem: request\": method, path, route, status, outcome, hashes of the tenant and key, fence, the upstream's and each store call's duration, trace id) instead of one per key event")
	fs.StringVar(&f.otlp, "otlp-endpoint", "", "send traces over OTLP to this http://HOST:PORT or https://HOST:PORT (TLS) collector; HOST:PORT is http://; with a client's traceparent, the request's span joins its trace and the upstream gets the next hop (default: no traces)")
	fs.StringVar(&f.otlpProtocol, "otlp-protocol", otlpHTTP, "the OTLP transport of --otlp-endpoint: "+otlpHTTP+" or "+otlpGRPC)
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long in-flight requests get to finish on SIGTERM; those still running then are cut and their keys turn UNKNOWN, and idem exits 0")
	fs.DurationVar(&f.drainDelay, "drain-delay", 0, "on SIGTERM, how long /readyz answers 503 before the proxy stops accepting (the time a load balancer needs to notice)")
}

// commandLineOnly are the flags of idem serve that no IDEM_ variable and
// no config file key sets: modes of one run, not settings.
var commandLineOnly = []string{"check-config"}

// checkConfigMode is --check-config: "" (off), "text", or "json". Given
// alone it is text.
type checkConfigMode string

func (m *checkConfigMode) String() string { return string(*m) }

func (m *checkConfigMode) IsBoolFlag() bool { return true }

func (m *checkConfigMode) Set(s string) error {
	switch s {
	case "true", "text":
		*m = "text"
	case "json":
		*m = "json"
	case "false":
		*m = ""
	default:
		return errors.New("want --check-config (text) or --check-config=json")
	}
	return nil
}

// serveSetup is what idem serve is told by its flags, their IDEM_
// variables and its config file, checked: everything but the store, the
// logger and the tracer, which runServe makes from it.
type serveSetup struct {
	cfg         gateway.Config
	storeURI    string
	storeOpts   gateway.StoreOptions
	logFormat   string
	logLevel    slog.Level
	otlp        *otlpTarget // nil: no traces
	checkConfig string
	flags       *flag.FlagSet
	settings    *settings
	fixed       map[string]string // the values of the restartOnly flags
}

// resolveServe defines idem serve's flags and resolves them: see
// serveFlags.
func resolveServe(args []string) (*serveFlags, *flag.FlagSet, *settings, error) {
	if err := refuseSchemaFlag(args); err != nil {
		return nil, nil, nil, err
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	defineServeFlags(fs, &f)
	st, err := resolveFlags(fs, args, "config", commandLineOnly...)
	if err != nil {
		return nil, nil, nil, err
	}
	if fs.NArg() > 0 {
		return nil, nil, nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return &f, fs, st, nil
}

// loadServe resolves the flags (resolveServe) and checks them. runServe
// calls it at start and again on each SIGHUP.
func loadServe(args []string) (*serveSetup, error) {
	f, fs, st, err := resolveServe(args)
	if err != nil {
		return nil, err
	}
	s := &serveSetup{storeURI: f.store, logFormat: f.logFormat, checkConfig: f.checkConfig,
		flags: fs, settings: st, fixed: map[string]string{}}
	for _, name := range restartOnly {
		s.fixed[name] = fs.Lookup(name).Value.String()
	}
	if err := s.check(f); err != nil {
		return nil, st.explain(err)
	}
	doc, err := json.Marshal(effective(s)) // what --check-config=json prints; GET /v1/config serves it
	if err != nil {
		return nil, err
	}
	s.cfg.EffectiveConfig = doc
	return s, nil
}

// check checks f's values and fills s from them.
func (s *serveSetup) check(f *serveFlags) error {
	fs := s.flags
	if err := s.logLevel.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, f.logLevel)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return fmt.Errorf("%w: --log-format %q: want text or json", errUsage, f.logFormat)
	}
	switch {
	case f.otlp != "":
		t, err := parseOTLP(f.otlp, f.otlpProtocol)
		if err != nil {
			return err
		}
		s.otlp = &t
	case flagSet(fs, "otlp-protocol"):
		return fmt.Errorf("%w: --otlp-protocol without --otlp-endpoint: say where the traces go", errUsage)
	}
	up, err := url.Parse(f.upstream)
	if f.upstream == "" || err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return fmt.Errorf("%w: --upstream must be an http:// or https:// URL, got %q", errUsage, redact.URL(f.upstream))
	}
	if flagSet(fs, "admin-token") && f.adminToken == "" {
		return fmt.Errorf("%w: --admin-token is empty (given as '' or by an empty IDEM_ADMIN_TOKEN), which would leave the key API open: "+
			"give a token, or leave --admin-token unset to run the admin API on loopback without one", errUsage)
	}
	if flagSet(fs, "admin-tokens-file") && strings.TrimSpace(f.adminTokensFile) == "" {
		return fmt.Errorf("%w: --admin-tokens-file is empty (given as '' or by an empty IDEM_ADMIN_TOKENS_FILE), which would leave the key API open: "+
			"name the file, or leave --admin-tokens-file unset to run the admin API on loopback without tokens", errUsage)
	}
	var policy idem.TakeoverPolicy
	switch f.takeover {
	case "unknown":
	case "run":
		policy = idem.TakeoverRun
	default:
		return fmt.Errorf("%w: --takeover %q: want unknown or run", errUsage, f.takeover)
	}
	if !(f.reconcileRate > 0) || f.reconcileConcurrency < 1 {
		return fmt.Errorf("%w: --reconcile-rate %v and --reconcile-concurrency %d must be positive", errUsage, f.reconcileRate, f.reconcileConcurrency)
	}
	format, err := idemhttp.ParseErrorFormat(f.errorFormat)
	if err != nil {
		return fmt.Errorf("%w: --error-format %q: want problem or stripe", errUsage, f.errorFormat)
	}
	if f.storeTimeout <= 0 {
		return fmt.Errorf("%w: --store-timeout %v: want a positive duration", errUsage, f.storeTimeout)
	}
	if f.mismatchStatus != 0 && (f.mismatchStatus < 400 || f.mismatchStatus > 499) {
		return fmt.Errorf("%w: --mismatch-status %d: want a 4xx status, or 0", errUsage, f.mismatchStatus)
	}
	if f.drainDelay < 0 || f.shutdownTimeout <= 0 {
		return fmt.Errorf("%w: --drain-delay %v and --shutdown-timeout %v: want a duration of at least 0, and a positive one", errUsage, f.drainDelay, f.shutdownTimeout)
	}
	if err := s.checkSettings(f); err != nil {
		return err
	}
	if flagSet(fs, "memory-limit") {
		s.storeOpts.MemoryLimit = int64(f.memoryLimit)
	}
	if flagSet(fs, "memory-tenant-share") {
		if !(f.memoryTenantShare > 0 && f.memoryTenantShare <= 1) {
			return fmt.Errorf("%w: --memory-tenant-share %v: want a fraction above 0 and at most 1", errUsage, f.memoryTenantShare)
		}
		s.storeOpts.MemoryTenantShare = f.memoryTenantShare
	}
	s.storeOpts.NoMigrate = f.noMigrate
	if err := gateway.CheckStore(f.store, &s.storeOpts); err != nil {
		return fmt.Errorf("%w: --store: %w", errUsage, err)
	}
	s.cfg = gateway.Config{
		Listen: f.listen, Upstream: up, StoreTimeout: f.storeTimeout, Lease: f.lease, Retention: f.retention,
		Methods: splitList(strings.ToUpper(f.methods)), RequireKey: f.requireKey, TenantHeader: f.tenantHeader, MaxBody: int64(f.maxBody),
		Wait: f.wait, FailOpen: f.failOpen, UpstreamTimeout: f.upstreamTimeout, Admin: f.admin, AdminToken: f.adminToken,
		ShutdownTimeout: f.shutdownTimeout, DrainDelay: f.drainDelay, Takeover: policy, ReconcileURL: f.reconcileURL,
		ReconcileToken: f.reconcileToken, ReconcileTimeout: f.reconcileTimeout, ReconcileEvery: f.reconcileEvery,
		ReconcileRate: f.reconcileRate, ReconcileConcurrency: f.reconcileConcurrency,
		AllowAnonymous: f.allowAnonymous, MaxResponse: int(f.maxResponse), AdminInsecure: f.adminInsecure,
		ReadTimeout: f.readTimeout, IdleTimeout: f.idleTimeout, MaxConns: f.maxConns,
		ErrorFormat: format, MismatchStatus: f.mismatchStatus, ReplayHeaders: splitList(f.replayHeaders),
		Repeatability: f.repeatability, KeyRetention: f.keyRetention,
		AdminTokensFile: f.adminTokensFile, AdminHosts: splitList(f.adminHosts), AccessLog: f.accessLog,
		TLSCert: f.tlsCert, TLSKey: f.tlsKey, AdminTLSCert: f.adminTLSCert, AdminTLSKey: f.adminTLSKey, AdminClientCA: f.adminClientCA,
	}
	if s.cfg.ReplayHeaders == nil {
		s.cfg.ReplayHeaders = []string{} // --replay-headers "": none beyond idemhttp's
	}
	if flagSet(fs, "tenant-from") {
		s.cfg.TenantFrom = append([]string{}, splitList(f.tenantFrom)...) // given empty: an error, not the default
	}
	if s.settings.file != nil {
		s.cfg.Routes = s.settings.file.routes
	}
	return nil
}

// checkSettings refuses the values that idem serve could not honour as
// written: a zero or negative duration or count that the gateway would
// replace by its default, an empty list or address that would mean
// something else than it says, and a setting given where it has no effect.
// --check-config runs it too, so it refuses exactly what a start refuses.
func (s *serveSetup) checkSettings(f *serveFlags) error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"lease", f.lease}, {"retention", f.retention}, {"upstream-timeout", f.upstreamTimeout}, {"read-timeout", f.readTimeout},
		{"idle-timeout", f.idleTimeout}, {"reconcile-timeout", f.reconcileTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("%w: --%s %v: want a positive duration", errUsage, d.name, d.v)
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"lease", f.lease}, {"retention", f.retention}, {"key-retention", f.keyRetention}} {
		if d.v > store.MaxDuration {
			return fmt.Errorf("%w: --%s %v is above %v, the longest a store keeps", errUsage, d.name, d.v, store.MaxDuration)
		}
	}
	if f.lease < time.Millisecond {
		return fmt.Errorf("%w: --lease %v is under the 1ms resolution of stores", errUsage, f.lease)
	}
	if f.maxConns < 1 {
		return fmt.Errorf("%w: --max-conns %d: want a positive number of connections", errUsage, f.maxConns)
	}
	for _, d := range []struct {
		name, zero string
		v          time.Duration
	}{{"wait", "answer 409 at once", f.wait}, {"key-retention", "the key ends with its response", f.keyRetention},
		{"reconcile-every", "no background sweep", f.reconcileEvery}} {
		if d.v < 0 {
			return fmt.Errorf("%w: --%s %v: want a positive duration, or 0 (%s)", errUsage, d.name, d.v, d.zero)
		}
	}
	if f.keyRetention > 0 && f.keyRetention <= f.retention {
		return fmt.Errorf("%w: --key-retention %v is not longer than --retention %v, so it would remember no key past its response: "+
			"make --key-retention longer than --retention, or 0 (the key ends with its response)", errUsage, f.keyRetention, f.retention)
	}
	if len(splitList(f.methods)) == 0 {
		return fmt.Errorf("%w: --methods %q: an empty list protects nothing: name the methods to protect (default POST,PATCH)", errUsage, f.methods)
	}
	if err := checkAddress("listen", f.listen); err != nil {
		return err
	}
	if f.admin != "" {
		if err := checkAddress("admin", f.admin); err != nil {
			return err
		}
	} else {
		for _, name := range []string{"admin-token", "admin-tokens-file", "admin-hosts", "admin-insecure", "admin-tls-cert", "admin-tls-key", "admin-client-ca"} {
			if flagSet(s.flags, name) {
				return fmt.Errorf("%w: --%s is given with --admin '' (no admin API), where it has no effect: give --admin an address, or leave --%s out", errUsage, name, name)
			}
		}
	}
	if flagSet(s.flags, "store") && strings.TrimSpace(f.store) == "" {
		return fmt.Errorf("%w: --store is empty: say memory, or give a redis://, rediss:// or postgres:// URI (%s)", errUsage, gateway.StoreURIHelp)
	}
	if flagSet(s.flags, "tenant-header") && strings.TrimSpace(f.tenantHeader) == "" {
		return fmt.Errorf("%w: --tenant-header is empty: name the header that carries the tenant, or leave --tenant-header out", errUsage)
	}
	hasURL := f.reconcileURL != ""
	if s.settings.file != nil {
		for _, rt := range s.settings.file.routes {
			hasURL = hasURL || rt.ReconcileURL != ""
		}
	}
	if !hasURL {
		for _, name := range []string{"reconcile-token", "reconcile-timeout", "reconcile-rate", "reconcile-concurrency"} {
			if flagSet(s.flags, name) {
				return fmt.Errorf("%w: --%s needs --reconcile-url (or a route's reconcile-url): without one there is no lookup for it to apply to", errUsage, name)
			}
		}
	}
	return nil
}

// checkAddress refuses an address that net.Listen would refuse at start,
// after --check-config had passed it: host:port, the port a number from 0
// to 65535 (or a service name); an empty host is every interface.
func checkAddress(name, addr string) error {
	if addr == "" {
		return fmt.Errorf("%w: --%s is empty, which would listen on every interface on a random port: give host:port, e.g. 127.0.0.1:8080", errUsage, name)
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Errorf("%w: --%s %q: want host:port with a port from 0 to 65535, e.g. 127.0.0.1:8080: %w", errUsage, name, addr, err)
	}
	return nil
}

// validate builds a gateway from s on a memory store: every error of the
// configuration that a start would meet (a route's pattern, a header
// list, the tenant's sources...), found before the start waits for the
// store, so that a bad configuration exits 2 at once.
func (s *serveSetup) validate() error {
	cfg := s.cfg
	cfg.Store, _ = memstore.New(nil)
	cfg.Logger = slog.New(slog.DiscardHandler)
	if _, err := gateway.New(cfg); err != nil {
		return s.settings.explain(fmt.Errorf("%w: %w", errUsage, err))
	}
	return nil
}

// configSource says where the configuration came from, for the first line
// of the log.
func (s *serveSetup) configSource() string {
	if s.settings.file == nil {
		return "flags, IDEM_ variables and defaults (no --config)"
	}
	return s.settings.file.path + " (" + s.settings.origins["config"].String() + "), under the flags and IDEM_ variables"
}

// newLogger is the logger of format (text or json, checked by loadServe).
func newLogger(w io.Writer, format string, level *slog.LevelVar) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// byteSize is a flag of bytes that also takes KiB, MiB and GiB suffixes.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = n, m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return errors.New("want a positive number of bytes, optionally with KiB, MiB or GiB")
	}
	if n > math.MaxInt64/mult {
		return fmt.Errorf("%s is more bytes than idem can count (at most %d)", s+suffixOf(mult), int64(math.MaxInt64))
	}
	*b = byteSize(n * mult)
	return nil
}

// suffixOf is the suffix of byteSize's multiplier mult.
func suffixOf(mult int64) string {
	switch mult {
	case 1 << 10:
		return "KiB"
	case 1 << 20:
		return "MiB"
	case 1 << 30:
		return "GiB"
	}
	return ""
}

// flagSet reports whether the flag was given: on the command line, by
// its IDEM_ variable or in the config file (resolveFlags sets those with
// fs.Set), not left at its default.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// splitList splits a comma-separated flag, dropping blanks and keeping
// the case of what it lists (cookie names are case-sensitive).
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
