package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/idemkit/idem"
)

// The defaults of the public listener's limits (docs/internet.md).
const (
	// DefaultReadTimeout bounds reading a whole request, body included: the
	// default --max-body of 1 MiB needs 35 KiB/s, which a mobile client
	// has, and a client dribbling its body holds a connection 30s at most.
	DefaultReadTimeout = 30 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection idle this long. It
	// is above the idle timeouts of common client pools (Go's 90s, load
	// balancers' 60s), so the client closes first and never sends a
	// request on a connection the gateway is closing.
	DefaultIdleTimeout = 120 * time.Second
	// headerTimeout bounds reading the request line and headers.
	headerTimeout = 10 * time.Second
	// answerTime is what the write deadline allows for sending the answer
	// after the longest upstream call and wait.
	answerTime = 30 * time.Second
	// fdReserve is the part of the open-file limit kept from client
	// connections, for the upstream pool (up to 1,024 idle connections),
	// the store, the admin API and the process's own files.
	fdReserve = 1024
)

// DefaultMaxConns is the default bound on concurrent client connections:
// the open-file limit less fdReserve, so a flood of connections waits in
// the kernel's accept queue instead of making accept fail with "too many
// open files" and starving the upstream and store connections. Go raises
// the soft limit to the hard one at start; where there is no limit to
// read the bound is 10,000.
func DefaultMaxConns() int {
	n, ok := openFileLimit()
	if !ok {
		return 10_000
	}
	return max(64, int(min(n, 1<<20))-fdReserve)
}

// writeTimeout is the write deadline of a request, counted by net/http
// from the end of its headers: reading the body, the wait for another
// attempt with the key and the upstream call (the longest of any route),
// and sending the answer.
func (c *Config) writeTimeout() time.Duration {
	wait := c.Wait
	for _, rt := range c.Routes {
		if rt.Wait != nil {
			wait = max(wait, *rt.Wait)
		}
	}
	return c.ReadTimeout + wait + c.longestUpstreamTimeout() + idem.FinalizeTimeout + answerTime
}

// longestUpstreamTimeout is the longest upstream timeout of the top level
// and the routes.
func (c *Config) longestUpstreamTimeout() time.Duration {
	longest := c.UpstreamTimeout
	for _, rt := range c.Routes {
		if rt.UpstreamTimeout != nil {
			longest = max(longest, *rt.UpstreamTimeout)
		}
	}
	return longest
}

// publicServer is the proxy's server with the limits of the Config.
func (g *Gateway) publicServer(limit *connLimiter) *http.Server {
	return &http.Server{
		Handler:           closeAfterChunked(g.proxy),
		ReadHeaderTimeout: min(headerTimeout, g.cfg.ReadTimeout),
		ReadTimeout:       g.cfg.ReadTimeout,
		WriteTimeout:      g.cfg.writeTimeout(),
		IdleTimeout:       g.cfg.IdleTimeout,
		ConnState:         limit.track,
		ErrorLog:          slog.NewLogLogger(g.cfg.Logger.Handler(), slog.LevelWarn),
	}
}

// adminMaxConns bounds the admin API's open connections. Its clients are
// few: a console or two (a browser opens at most 6 connections to a
// host), an operator's tools, a scraper or two and the probes; 64 gives
// them room many times over. It bounds what clients that ask for large
// answers (a stored response, up to --max-response; a page of 1,000
// keys; /metrics) and never read them hold: each connection holds its
// goroutine and its answer's buffers until adminWriteTimeout.
const adminMaxConns = 64

// adminWriteTimeout is the admin API's write deadline, counted as
// writeTimeout is: reading the body (ReadTimeout), the longest wait of an
// admin call, and sending the answer (answerTime). The longest wait is a
// reconciliation's (POST .../reconcile): six store calls (the audit's
// read before and after; the key's read, the claim, the resolve and, when
// another process resolved the key meanwhile, a read; each bounded by
// --store-timeout) and the lookup (--reconcile-timeout). A scrape of
// /metrics waits for a store read and the UNKNOWN census, which may wait
// for another scrape's.
func (c *Config) adminWriteTimeout() time.Duration {
	storeCall := cmp.Or(c.StoreTimeout, idem.DefaultStoreTimeout)
	reconcile := 6*storeCall + cmp.Or(c.ReconcileTimeout, 5*time.Second) // idem.Options.ReconcileTimeout's zero
	scrape := storeCall + 2*unknownCountTimeout
	return c.ReadTimeout + max(reconcile, scrape) + answerTime
}

// adminServer is the admin API's server and the listener it serves, over
// ln: at most adminMaxConns connections (TLS over the limiter, as the
// public listener's), and deadlines that no legitimate call reaches.
func (g *Gateway) adminServer(ln net.Listener) (*http.Server, net.Listener) {
	limited, track := LimitAdminConns(ln)
	srv := &http.Server{Handler: g.admin, ReadHeaderTimeout: headerTimeout, ReadTimeout: g.cfg.ReadTimeout,
		WriteTimeout: g.cfg.adminWriteTimeout(), IdleTimeout: g.cfg.IdleTimeout, ConnState: track,
		ErrorLog: slog.NewLogLogger(g.cfg.Logger.Handler(), slog.LevelWarn)} // a refused handshake, in idem's log format
	return srv, g.adminTLS.listen(limited)
}

// LimitAdminConns bounds the connections of an admin listener to
// adminMaxConns, also for the admin API idem serve runs before the
// gateway. It returns the listener to serve and the server's ConnState
// hook, with which it closes an idle keep-alive connection to make room.
// Closing the listener wakes an Accept waiting for room.
func LimitAdminConns(ln net.Listener) (net.Listener, func(net.Conn, http.ConnState)) {
	l := newConnLimiter(ln, adminMaxConns)
	return l, l.track
}

// closeAfterChunked closes the connection after a request framed by
// Transfer-Encoding. RFC 9112 §6.3 says a server MUST close the connection
// after a request that carried both Transfer-Encoding and Content-Length (a
// sign of request smuggling), but net/http removes the Content-Length
// before a handler sees the request, so the two cannot be told apart: the
// gateway closes after every chunked request. API clients send a length,
// and a chunked upload costs one new connection.
func closeAfterChunked(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// connLimiter bounds the connections a listener has open. At the bound,
// Accept closes an idle keep-alive connection to make room (its client
// reconnects, as after an idle timeout) and otherwise waits for one to
// close; the connections waiting to be accepted queue in the kernel.
type connLimiter struct {
	net.Listener
	slots chan struct{} // one token per open connection
	done  chan struct{} // closed by Close: Accept stops waiting

	mu        sync.Mutex
	idle      map[net.Conn]bool // keep-alive connections between requests; guarded by mu
	closeOnce sync.Once
}

func newConnLimiter(ln net.Listener, n int) *connLimiter {
	return &connLimiter{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{}), idle: map[net.Conn]bool{}}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	default:
		l.closeIdle()
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
}

// closeIdle closes one idle keep-alive connection, if there is one.
func (l *connLimiter) closeIdle() {
	l.mu.Lock()
	var victim net.Conn
	for c := range l.idle {
		victim = c
		delete(l.idle, c)
		break
	}
	l.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
}

// track is the server's ConnState hook: it keeps the set of idle
// connections that closeIdle may close.
func (l *connLimiter) track(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s == http.StateIdle {
		l.idle[c] = true
	} else {
		delete(l.idle, c)
	}
}

func (l *connLimiter) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitedConn gives its slot back once, however often it is closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
	// halfClosed is set when net/http closed the write side before the
	// connection: it answered without reading the whole request.
	halfClosed atomic.Bool
}

// The bounds of the lingering close of a connection whose request was
// answered unread (linger).
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 4 << 20
)

// CloseWrite is what net/http calls on a connection whose request it
// answered without reading it all (a header block over the limit: 431; a
// body it did not read to its end) before it closes it. The wrapper must
// pass it on, or the client gets no end of the answer before the close.
func (c *limitedConn) CloseWrite() error {
	c.halfClosed.Store(true)
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitedConn) Close() error {
	if c.halfClosed.Swap(false) {
		c.linger()
	}
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// linger reads and drops what the client still sends of the request that
// was answered unread, until the client closes its side, within lingerTime
// and lingerBytes. Closing a socket with unread data resets the
// connection, and a client still sending (a 1.1 MB header block on a
// slow link) then loses the answer it has not read yet: a reset instead of
// its 431 (RFC 9112 §9.6 asks for this lingering close). io.Discard reads
// into a pooled buffer.
func (c *limitedConn) linger() {
	c.Conn.SetReadDeadline(time.Now().Add(lingerTime))
	io.CopyN(io.Discard, c.Conn, lingerBytes)
}

// checkAdmin refuses an admin API that anyone on the network could use: the
// key API reads stored responses and deletes keys, so without a token it
// listens on a loopback address only, unless insecure says otherwise. It
// refuses insecure where it allows nothing, so that who sets it does not
// believe it changed something.
func checkAdmin(cfg Config) error {
	if t := cfg.AdminToken; t != "" && (strings.TrimSpace(t) != t || strings.ContainsFunc(t, unicode.IsControl)) {
		return errors.New("gateway: --admin-token is blank, has white space around it or holds a control character: " +
			"no request's Authorization header could match it (HTTP trims header values); give a real token")
	}
	if t := cfg.AdminToken; t != "" && len(t) < minAdminToken {
		return fmt.Errorf("gateway: --admin-token is shorter than %d bytes, too short to be a secret: "+
			"give a random one (openssl rand -hex 32)", minAdminToken)
	}
	if cfg.AdminInsecure {
		why := ""
		switch {
		case cfg.Admin == "":
			why = "--admin is empty (no admin API)"
		case cfg.AdminToken != "":
			why = "--admin-token is set, so the admin API requires a token"
		case cfg.AdminTokensFile != "":
			why = "--admin-tokens-file is set, so the admin API requires a token"
		case cfg.AdminClientCA != "":
			why = "--admin-client-ca is set, so the admin API requires a client certificate"
		case isLoopback(cfg.Admin):
			why = "--admin listens on loopback " + cfg.Admin + ", which needs no token"
		}
		if why != "" {
			return errors.New("gateway: --admin-insecure has no effect: " + why +
				"; it only allows an --admin address beyond loopback without a token or client certificates: leave --admin-insecure out")
		}
	}
	if cfg.Admin == "" || cfg.hasAdminTokens() || cfg.AdminClientCA != "" || cfg.AdminInsecure || isLoopback(cfg.Admin) {
		return nil // a client certificate of --admin-client-ca authenticates as a token does
	}
	return errors.New("gateway: --admin " + cfg.Admin + " is reachable from the network and has no token, " +
		"so anyone could read stored responses and delete keys: set --admin-token (or IDEM_ADMIN_TOKEN) or --admin-tokens-file, " +
		"require client certificates (--admin-tls-cert, --admin-tls-key, --admin-client-ca), listen on 127.0.0.1, or pass --admin-insecure")
}

// hasAdminTokens reports whether the admin API requires a token.
func (c Config) hasAdminTokens() bool { return c.AdminToken != "" || c.AdminTokensFile != "" }

// warnAdmin logs, at start, that the key API has no token.
func warnAdmin(cfg Config, addr net.Addr) {
	switch {
	case cfg.Admin == "" || cfg.hasAdminTokens():
	case cfg.AdminClientCA != "":
		cfg.Logger.Info("idem: the admin API authenticates by client certificate (--admin-client-ca, no token): "+
			"every holder of one is read-write, named in the audit by its subject", "admin", addr.String())
	case isLoopback(cfg.Admin):
		cfg.Logger.Warn("idem: the admin key API has no --admin-token: every process on this host can read stored responses and delete keys",
			"admin", addr.String())
	default:
		cfg.Logger.Error("idem: INSECURE: the admin key API listens on a network address without --admin-token (--admin-insecure): "+
			"anyone who reaches it can read stored responses and delete keys", "admin", addr.String())
	}
}

// isLoopback reports whether addr (host:port) names a loopback address
// only. An empty host, 0.0.0.0, [::] and names other than localhost are
// not: they may be reachable from elsewhere.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// defaultMaxResponse is idemhttp's default replay buffer
// (Options.MaxResponseBuffer), the default of --max-response.
const defaultMaxResponse = 1 << 20

// defaultMaxResult is the engine's own bound on a stored result body
// (idem.Options.MaxResultBytes); --max-response raises it when larger.
const defaultMaxResult = 16 << 20

// hardenDefaults fills in the limits' defaults, checks the admin API's
// exposure and returns the sources of the tenant.
func (c *Config) hardenDefaults() ([]tenantSource, error) {
	if c.ReadTimeout < 0 || c.IdleTimeout < 0 || c.MaxConns < 0 || c.MaxResponse < 0 {
		return nil, errors.New("gateway: negative --read-timeout, --idle-timeout, --max-conns or --max-response")
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultReadTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns()
	}
	if c.MaxResponse == 0 {
		c.MaxResponse = defaultMaxResponse
	}
	if err := checkAdmin(*c); err != nil {
		return nil, err
	}
	specs := c.TenantFrom
	switch {
	case c.TenantHeader != "" && specs != nil:
		return nil, errors.New("gateway: set --tenant-from or --tenant-header, not both")
	case c.TenantHeader != "":
		specs = []string{"header:" + c.TenantHeader}
	case specs == nil:
		specs = DefaultTenantFrom(c.ErrorFormat)
	}
	return parseTenantSources(specs)
}
