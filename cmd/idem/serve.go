package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store/memstore"
)

func runServe(ctx context.Context, args []string, _, stderr io.Writer) error {
	s, err := loadServe(args)
	if err != nil {
		return err
	}
	level := new(slog.LevelVar)
	level.Set(s.logLevel)
	logger, err := newLogger(stderr, s.logFormat, level)
	if err != nil {
		return err
	}
	var running atomic.Pointer[gateway.Gateway]
	defer watchReload(ctx, logger, func() { reloadServe(running.Load(), args, s, level, logger) })()
	storeOpts := s.storeOpts
	storeOpts.Logger = logger
	store, closeStore, err := gateway.OpenStore(ctx, s.storeURI, &storeOpts)
	if err != nil {
		return s.file.explain(fmt.Errorf("%w: --store: %w", errUsage, err))
	}
	defer closeStore()
	cfg := s.cfg
	cfg.Store, cfg.Logger = store, logger
	if s.otlp != "" {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(s.otlp), otlptracehttp.WithInsecure())
		if err != nil {
			return fmt.Errorf("--otlp-endpoint: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		defer tp.Shutdown(context.WithoutCancel(ctx))
		cfg.Tracer = tp.Tracer("github.com/idemkit/idem")
	}
	g, err := gateway.New(cfg)
	if err != nil {
		return s.file.explain(fmt.Errorf("%w: %w", errUsage, err))
	}
	running.Store(g)
	return g.Run(ctx, nil)
}

// serveSetup is what idem serve is told by its flags, their IDEM_
// variables and its config file, checked: everything but the store, the
// logger and the tracer, which runServe makes from it.
type serveSetup struct {
	cfg       gateway.Config
	storeURI  string
	storeOpts gateway.StoreOptions
	logFormat string
	logLevel  slog.Level
	otlp      string
	file      *configFile       // nil without --config
	fixed     map[string]string // the values of the restartOnly flags
}

// loadServe reads the flags, then their IDEM_ variables, then the config
// file for what neither gave, and checks them. runServe calls it at start
// and again on each SIGHUP.
func loadServe(args []string) (*serveSetup, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	configPath := fs.String("config", "", "a YAML file of settings (the flags' names as keys) and routes, reloaded on SIGHUP; a flag given on the command line or as an IDEM_ variable wins over the file (docs/deployment.md, \"Configuration file\")")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the gateway")
	upstream := fs.String("upstream", "", "URL of the HTTP API behind the gateway (required)")
	storeURI := fs.String("store", "memory", "where keys live: "+gateway.StoreURIHelp)
	storeTimeout := fs.Duration("store-timeout", idem.DefaultStoreTimeout, "bound of every store call, the store client's retries included: a request whose key the store does not answer for by then gets 503 store_unavailable and does not run; a result it does not store by then is held in memory and retried")
	lease := fs.Duration("lease", 30*time.Second, "how long a request owns its key before a retry may take it over, renewed while it runs")
	retention := fs.Duration("retention", 24*time.Hour, "how long a finished response is replayed")
	keyRetention := fs.Duration("key-retention", 0, "how long, from completion, a key is remembered: past --retention the response is dropped and a compact tombstone (fingerprint, status, fence, completion time) answers retries with 410 key_expired instead of running them again; 0: the key ends with its response")
	repeatability := fs.Bool("repeatability", false, "understand OASIS Repeatable Requests (Azure's SDKs send them): Repeatability-Request-ID as a key, with Repeatability-First-Sent; a request first sent longer ago than keys are kept gets 412 first_sent_stale; answers carry Repeatability-Result")
	methods := fs.String("methods", "POST,PATCH", "comma-separated methods that idempotency applies to; others pass through")
	requireKey := fs.Bool("require-key", false, "answer 400 to a request of those methods without an Idempotency-Key")
	tenantHeader := fs.String("tenant-header", "", "trust this request header as the tenant (e.g. X-Tenant-ID); an alias of --tenant-from header:NAME")
	tenantFrom := fs.String("tenant-from", "", gateway.TenantSourcesHelp+"; a request with none of them gets 400 tenant_missing (default: authorization; with --error-format stripe: authorization,header:Stripe-Account)")
	allowAnonymous := fs.Bool("allow-anonymous", false, "let requests without any --tenant-from credentials share one tenant (default: 400 tenant_missing)")
	maxBody := byteSize(1 << 20)
	fs.Var(&maxBody, "max-body", "largest request body (bytes, or with KiB/MiB/GiB); larger gets 413")
	maxResponse := byteSize(1 << 20)
	fs.Var(&maxResponse, "max-response", "largest response kept for replay (bytes, or with KiB/MiB/GiB); a larger one reaches the client once and its retries get 422 not_replayable")
	memoryLimit := byteSize(256 << 20)
	fs.Var(&memoryLimit, "memory-limit", "bound of the memory store (bytes, or with KiB/MiB/GiB); when stored results fill it, new keys get 503 store_full")
	memoryTenantShare := fs.Float64("memory-tenant-share", memstore.DefaultTenantShare, "fraction of --memory-limit one tenant's stored results may take; past it that tenant's new keys get 503 store_full, the other tenants' do not (1: no per-tenant bound)")
	readTimeout := fs.Duration("read-timeout", gateway.DefaultReadTimeout, "longest time to read a whole request, body included")
	idleTimeout := fs.Duration("idle-timeout", gateway.DefaultIdleTimeout, "close a keep-alive connection idle this long")
	maxConns := fs.Int("max-conns", gateway.DefaultMaxConns(), "most client connections open at once (default: the open-file limit less 1024); more wait to be accepted")
	wait := fs.Duration("wait", 0, "wait up to this long for an in-flight request with the same key and replay it, instead of 409")
	failOpen := fs.Bool("fail-open", false, "when the store is down, pass requests through without idempotency (default: 503)")
	upstreamTimeout := fs.Duration("upstream-timeout", 30*time.Second, "answer 504 when the upstream takes longer; the request was sent, so the key turns UNKNOWN")
	takeover := fs.String("takeover", "unknown", "a key whose previous attempt's lease ended (crash, stall): unknown (reconcile it, else UNKNOWN) or run (send it again with Idempotency-Previous-Fence)")
	reconcileURL := fs.String("reconcile-url", "", "the upstream's lookup of a request by key, a URL template with {key} (and {tenant}, {fence}): see docs/reconcile.md")
	reconcileToken := fs.String("reconcile-token", "", "bearer token sent to --reconcile-url")
	reconcileTimeout := fs.Duration("reconcile-timeout", 5*time.Second, "bound of one --reconcile-url lookup; past it the key stays UNKNOWN")
	reconcileEvery := fs.Duration("reconcile-every", 0, "reconcile every UNKNOWN key in the background at this interval (needs --reconcile-url); 0: only when a retry comes")
	reconcileRate := fs.Float64("reconcile-rate", idem.DefaultReconcileRate, "most lookups the background sweep starts per second")
	reconcileConcurrency := fs.Int("reconcile-concurrency", idem.DefaultReconcileConcurrency, "most lookups the background sweep has in flight at once; a key whose lookup failed is asked again after a backoff (30s, doubling to 30m)")
	admin := fs.String("admin", "127.0.0.1:9090", "address of the admin API (/healthz, /readyz, /metrics, /v1/keys, /v1/stats, the console at /ui/); empty turns it off")
	adminToken := fs.String("admin-token", "", "bearer token the admin key API requires; without one the admin API must listen on loopback")
	adminInsecure := fs.Bool("admin-insecure", false, "allow --admin on a non-loopback address without --admin-token (anyone who reaches it can read and delete keys)")
	adminTokensFile := fs.String("admin-tokens-file", "", "a file of admin tokens, one 'name role token' a line (role read-only or read-write), read again on SIGHUP; with --admin-token (read-write, named admin-token)")
	adminHosts := fs.String("admin-hosts", "", "comma-separated names (name, or name:port) the admin API answers besides its --admin address and loopback on its port, e.g. the name of a proxy in front of it; any other Host or Origin is refused")
	errorFormat := fs.String("error-format", "problem", "shape of error answers: problem (application/problem+json, RFC 9457) or stripe (Stripe's error object, statuses and retry headers, for Stripe's SDKs); see docs/problems.md")
	mismatchStatus := fs.Int("mismatch-status", 0, "status of key_mismatch (a key reused for another request); 0: the format's, 422 for problem, 400 for stripe")
	replayHeaders := fs.String("replay-headers", strings.Join(gateway.DefaultReplayHeaders, ","), "comma-separated upstream response headers a replay carries, besides Content-Type, Location, Content-Language, Content-Disposition and ETag; Set-Cookie, Authorization and hop-by-hop headers are refused; a replay always echoes Idempotency-Key")
	logFormat := fs.String("log-format", "text", "text or json")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	otlp := fs.String("otlp-endpoint", "", "send traces over OTLP/HTTP to this host:port (default: no traces)")
	shutdownTimeout := fs.Duration("shutdown-timeout", 30*time.Second, "how long in-flight requests get to finish on SIGTERM; those still running then are cut and their keys turn UNKNOWN")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	s := &serveSetup{storeURI: *storeURI, logFormat: *logFormat, otlp: *otlp, fixed: map[string]string{}}
	if *configPath != "" {
		f, err := loadConfigFile(*configPath, fs)
		if err == nil {
			err = f.apply(fs)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		s.file = f
	}
	for _, name := range restartOnly {
		s.fixed[name] = fs.Lookup(name).Value.String()
	}
	err := func() error {
		if err := s.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
			return fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, *logLevel)
		}
		up, err := url.Parse(*upstream)
		if *upstream == "" || err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
			return fmt.Errorf("%w: --upstream must be an http:// or https:// URL, got %q", errUsage, redact.URL(*upstream))
		}
		if flagSet(fs, "admin-token") && *adminToken == "" {
			return fmt.Errorf("%w: --admin-token is empty (given as '' or by an empty IDEM_ADMIN_TOKEN), which would leave the key API open: "+
				"give a token, or leave --admin-token unset to run the admin API on loopback without one", errUsage)
		}
		var policy idem.TakeoverPolicy
		switch *takeover {
		case "unknown":
		case "run":
			policy = idem.TakeoverRun
		default:
			return fmt.Errorf("%w: --takeover %q: want unknown or run", errUsage, *takeover)
		}
		if !(*reconcileRate > 0) || *reconcileConcurrency < 1 {
			return fmt.Errorf("%w: --reconcile-rate %v and --reconcile-concurrency %d must be positive", errUsage, *reconcileRate, *reconcileConcurrency)
		}
		format, err := idemhttp.ParseErrorFormat(*errorFormat)
		if err != nil {
			return fmt.Errorf("%w: --error-format %q: want problem or stripe", errUsage, *errorFormat)
		}
		if *storeTimeout <= 0 {
			return fmt.Errorf("%w: --store-timeout %v: want a positive duration", errUsage, *storeTimeout)
		}
		if *mismatchStatus != 0 && (*mismatchStatus < 400 || *mismatchStatus > 499) {
			return fmt.Errorf("%w: --mismatch-status %d: want a 4xx status, or 0", errUsage, *mismatchStatus)
		}
		if flagSet(fs, "memory-limit") {
			s.storeOpts.MemoryLimit = int64(memoryLimit)
		}
		if flagSet(fs, "memory-tenant-share") {
			if !(*memoryTenantShare > 0 && *memoryTenantShare <= 1) {
				return fmt.Errorf("%w: --memory-tenant-share %v: want a fraction above 0 and at most 1", errUsage, *memoryTenantShare)
			}
			s.storeOpts.MemoryTenantShare = *memoryTenantShare
		}
		s.cfg = gateway.Config{
			Listen: *listen, Upstream: up, StoreTimeout: *storeTimeout, Lease: *lease, Retention: *retention,
			Methods: splitList(strings.ToUpper(*methods)), RequireKey: *requireKey, TenantHeader: *tenantHeader, MaxBody: int64(maxBody),
			Wait: *wait, FailOpen: *failOpen, UpstreamTimeout: *upstreamTimeout, Admin: *admin, AdminToken: *adminToken,
			ShutdownTimeout: *shutdownTimeout, Takeover: policy, ReconcileURL: *reconcileURL,
			ReconcileToken: *reconcileToken, ReconcileTimeout: *reconcileTimeout, ReconcileEvery: *reconcileEvery,
			ReconcileRate: *reconcileRate, ReconcileConcurrency: *reconcileConcurrency,
			AllowAnonymous: *allowAnonymous, MaxResponse: int(maxResponse), AdminInsecure: *adminInsecure,
			ReadTimeout: *readTimeout, IdleTimeout: *idleTimeout, MaxConns: *maxConns,
			ErrorFormat: format, MismatchStatus: *mismatchStatus, ReplayHeaders: splitList(*replayHeaders),
			Repeatability: *repeatability, KeyRetention: *keyRetention,
			AdminTokensFile: *adminTokensFile, AdminHosts: splitList(*adminHosts),
		}
		if s.cfg.ReplayHeaders == nil {
			s.cfg.ReplayHeaders = []string{} // --replay-headers "": none beyond idemhttp's
		}
		if flagSet(fs, "tenant-from") {
			s.cfg.TenantFrom = append([]string{}, splitList(*tenantFrom)...) // given empty: an error, not the default
		}
		if s.file != nil {
			s.cfg.Routes = s.file.routes
		}
		return nil
	}()
	if err != nil {
		return nil, s.file.explain(err)
	}
	return s, nil
}

func newLogger(w io.Writer, format string, level *slog.LevelVar) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("%w: --log-format %q: want text or json", errUsage, format)
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
	*b = byteSize(n * mult)
	return nil
}

// flagSet reports whether the flag was given, on the command line or by
// its environment variable.
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
