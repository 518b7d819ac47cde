package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storeurl"
)

// The waits between attempts to reach the store at start: the first,
// doubled after each failure up to the last.
const (
	storeRetryFirst = 250 * time.Millisecond
	storeRetryMax   = 30 * time.Second
)

// startingAdminDrain bounds how long the requests to the starting admin
// API get to finish when the gateway takes its listener over.
const startingAdminDrain = time.Second

// runServe is idem serve: a configuration that cannot be honoured exits 2
// at once; a store that does not answer is retried until it does or a
// signal stops the wait (exit 0), with /healthz answering and /readyz 503
// meanwhile; a drain exits 0.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, err := loadServe(args)
	if err == nil {
		err = s.validate()
	}
	if err != nil {
		return err
	}
	gc, err := serveGOGC()
	if err != nil {
		return err
	}
	procs, err := serveGOMAXPROCS()
	if err != nil {
		return err
	}
	if s.checkConfig != "" {
		return printConfig(stdout, s)
	}
	gc.apply()
	level := new(slog.LevelVar)
	level.Set(s.logLevel)
	logger := newLogger(stderr, s.logFormat, level)
	secrets := redact.Secrets(s.storeURI)
	redis.SetLogger(redisLogger{logger, secrets}) // the process's only logger of go-redis: no longer plain text on stderr
	logger.Info("idem: starting", "version", version(), "store", redact.URL(s.storeURI), "config", s.configSource(),
		"gogc", gc.percent, "gogc_from", gc.from, "gomaxprocs", runtime.GOMAXPROCS(0), "gomaxprocs_from", procs.from)
	for _, w := range s.settings.warnings() {
		logger.Warn(w)
	}
	var running atomic.Pointer[gateway.Gateway]
	defer watchReload(ctx, logger, func() { reloadServe(running.Load(), args, s, level, logger) })()
	cfg := s.cfg
	cfg.Logger = logger
	cfg.AdaptProcs = procs.adapt
	var starting *startingAdmin
	if cfg.Admin != "" {
		tlsConf, err := cfg.AdminTLS()
		if err != nil {
			return s.settings.explain(fmt.Errorf("%w: %w", errUsage, err))
		}
		if starting, err = serveStarting(cfg, tlsConf, logger); err != nil {
			return fmt.Errorf("gateway: admin listen: %w", err)
		}
		logger.Info("idem: admin API up: /healthz answers, /readyz answers 503 until the store answers", "admin", starting.ln.Addr().String())
	}
	st, closeStore, err := openStore(ctx, s, logger, secrets)
	if starting != nil {
		cfg.AdminListener = starting.handOver()
	}
	if err != nil || st == nil {
		if cfg.AdminListener != nil {
			cfg.AdminListener.Close()
		}
		return err
	}
	defer closeStore()
	cfg.Store = st
	if s.otlp != nil {
		tp, err := newTracerProvider(ctx, *s.otlp)
		if err != nil {
			if cfg.AdminListener != nil {
				cfg.AdminListener.Close()
			}
			return err
		}
		defer tp.Shutdown(context.WithoutCancel(ctx)) // exports the spans still batched
		cfg.Tracer = tp.Tracer("github.com/idemkit/idem")
	}
	g, err := gateway.New(cfg)
	if err != nil {
		if cfg.AdminListener != nil {
			cfg.AdminListener.Close()
		}
		return s.settings.explain(fmt.Errorf("%w: %w", errUsage, err))
	}
	running.Store(g)
	return g.Run(ctx, nil)
}

// openStore opens the store and checks that it answers, retrying with a
// doubling wait (storeRetryFirst to storeRetryMax) and logging each
// failure: a database slow to boot must not leave the gateway down for
// good (a systemd unit does not restart exit status 2). It returns a nil
// store when ctx ends first.
func openStore(ctx context.Context, s *serveSetup, log *slog.Logger, secrets []string) (store.Store, func() error, error) {
	opts := s.storeOpts
	opts.Logger = log
	delay := storeRetryFirst
	for attempt := 1; ; attempt++ {
		st, closeStore, err := gateway.OpenStore(ctx, s.storeURI, &opts)
		if err == nil {
			if err = storeAnswers(ctx, st, s.cfg.StoreTimeout); err == nil {
				log.Info("idem: the store answers", "store", redact.URL(s.storeURI), "attempts", attempt)
				if err := refuseEviction(ctx, st, s.cfg.StoreTimeout, log); err != nil {
					closeStore()
					return nil, nil, err
				}
				return st, closeStore, nil
			}
			closeStore()
		}
		if errors.Is(err, gateway.ErrStoreURI) { // CheckStore passed: not expected, and not worth a retry
			return nil, nil, fmt.Errorf("%w: --store: %w", errUsage, err)
		}
		if errors.Is(err, storeurl.ErrNotMigrated) {
			err = fmt.Errorf("%w: run 'idem migrate' with the same --store (as a role that may CREATE), or start without --no-migrate", err)
		}
		if ctx.Err() == nil {
			log.Warn("idem: the store does not answer; retrying (/readyz answers 503 until it does)", "store", redact.URL(s.storeURI),
				"attempt", attempt, "retry_in", delay.String(), "err", scrub(err.Error(), secrets))
			select {
			case <-ctx.Done():
			case <-time.After(delay):
			}
		}
		if ctx.Err() != nil {
			log.Info("idem: stopped before the store answered; nothing was served")
			return nil, nil, nil
		}
		delay = min(2*delay, storeRetryMax)
	}
}

// refuseEviction refuses a Redis store whose server may evict keys: it
// would drop the store's records when it runs out of memory (the
// volatile-* policies spare the unsettled ones, which have no TTL, but
// take results), and the retry of an evicted UNKNOWN key or result runs
// the request again. A server that
// does not say (INFO refused by an ACL) is logged, not refused. The
// layered store's Redis is a mirror, which PostgreSQL backs: it is not
// asked.
func refuseEviction(ctx context.Context, st store.Store, timeout time.Duration, log *slog.Logger) error {
	r, ok := st.(interface {
		EvictionPolicy(context.Context) (string, error)
	})
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	policy, err := r.EvictionPolicy(ctx)
	switch {
	case err != nil:
		log.Warn("idem: could not read the Redis server's maxmemory-policy; it must be noeviction, or Redis may drop keys (UNKNOWN ones too) and their retries run again",
			"err", err.Error())
		return nil
	case policy != redisstore.NoEviction:
		return fmt.Errorf("%w: --store: the Redis server's maxmemory-policy is %s: out of memory, it drops keys, an UNKNOWN key or a result too, "+
			"and their retries run the requests again; set maxmemory-policy %s (docs/stores.md)", errUsage, policy, redisstore.NoEviction)
	}
	return nil
}

// storeAnswers reports whether the store answers a read within the store
// timeout: what /readyz asks.
func storeAnswers(ctx context.Context, st store.Store, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := st.Get(ctx, store.ID{Tenant: "idem", Key: "readyz"}); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// scrub replaces each secret in text by redact.Mask: a client library's
// error may quote the URL it was given.
func scrub(text string, secrets []string) string {
	for _, s := range secrets {
		text = strings.ReplaceAll(text, s, redact.Mask)
	}
	return text
}

// redisLogger sends go-redis's own log lines (a failed dial, a pool event)
// to idem's logger, in its format (issue 31, item 13: they went to stderr
// as plain text past --log-format json). rueidis logs nothing.
type redisLogger struct {
	log     *slog.Logger
	secrets []string
}

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "idem: redis client", "detail", scrub(strings.TrimSpace(fmt.Sprintf(format, v...)), l.secrets))
}

// startingAdmin is the admin API while the store has not answered:
// /healthz 200 (the process is alive), everything else 503. handOver
// gives its listener, still open, to the gateway: no connection is refused
// between the two.
type startingAdmin struct {
	ln      *net.TCPListener
	limited net.Listener // what srv serves (but TLS): closing it wakes an Accept waiting for room
	srv     *http.Server
	served  chan struct{} // closed when srv.Serve has returned
	handed  atomic.Bool
}

func serveStarting(cfg gateway.Config, tlsConf *tls.Config, log *slog.Logger) (*startingAdmin, error) {
	ln, err := net.Listen("tcp", cfg.Admin)
	if err != nil {
		return nil, err
	}
	a := &startingAdmin{ln: ln.(*net.TCPListener), served: make(chan struct{})}
	var served net.Listener
	a.srv, served = startingServer(cfg, log, lent{a})
	a.limited = served
	if tlsConf != nil {
		served = tls.NewListener(served, tlsConf) // the admin API's TLS from the first connection
	}
	go func() {
		defer close(a.served)
		a.srv.Serve(served)
	}()
	return a, nil
}

// startingAnswerTime is what the starting admin API's write deadline
// allows for sending an answer, as the gateway's does.
const startingAnswerTime = 30 * time.Second

// startingServer is the starting admin API's server. Its handlers wait for
// nothing and answer a few bytes, but a client that sends requests and
// never reads the answers, dribbles a body or keeps a connection idle
// would hold its connection for as long as the store stays down: each
// of those waits has the gateway's bound (--read-timeout, --idle-timeout),
// and it serves ln with the gateway admin API's bound on connections.
func startingServer(cfg gateway.Config, log *slog.Logger, ln net.Listener) (*http.Server, net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		idemhttp.WriteProblem(w, http.StatusServiceUnavailable, idemhttp.CodeStoreUnavailable, "idem is starting: the store has not answered yet")
	})
	read := cmp.Or(cfg.ReadTimeout, gateway.DefaultReadTimeout)
	limited, track := gateway.LimitAdminConns(ln)
	return &http.Server{Handler: mux, ReadHeaderTimeout: startingAdminDrain, ReadTimeout: read, WriteTimeout: read + startingAnswerTime,
		IdleTimeout: cmp.Or(cfg.IdleTimeout, gateway.DefaultIdleTimeout), ConnState: track,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}, limited
}

// handOver stops the starting admin API, lets its requests finish (for
// startingAdminDrain at most) and returns its listener, open.
func (a *startingAdmin) handOver() net.Listener {
	a.handed.Store(true)
	a.ln.SetDeadline(time.Unix(1, 0)) // wakes the Accept in progress, which then fails as closed
	a.limited.Close()                 // and one waiting for room; the socket stays open (lent)
	<-a.served
	ctx, cancel := context.WithTimeout(context.Background(), startingAdminDrain)
	defer cancel()
	if a.srv.Shutdown(ctx) != nil {
		a.srv.Close()
	}
	a.ln.SetDeadline(time.Time{})
	return a.ln
}

// lent is the starting admin's listener as its server sees it: closing it
// leaves the socket open, and after handOver its Accept fails as closed.
type lent struct{ a *startingAdmin }

func (l lent) Accept() (net.Conn, error) {
	c, err := l.a.ln.Accept()
	if err != nil && l.a.handed.Load() {
		return nil, net.ErrClosed
	}
	return c, err
}

func (l lent) Close() error   { return nil }
func (l lent) Addr() net.Addr { return l.a.ln.Addr() }
