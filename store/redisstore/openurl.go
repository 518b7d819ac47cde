package redisstore

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/internal/urlquery"
)

// OpenURL opens a store on a Redis store URL (the forms of ParseURL) with
// a client of its own, which the store's Close closes. On top of
// ParseURL's options it takes:
//
//	client=go-redis|rueidis  the Redis client: go-redis (the default, as
//	                         ParseURL's) or rueidis, which pipelines every
//	                         call on one connection per node (idem serve's
//	                         default: it measured faster in the gateway at
//	                         32 and 128 clients, docs/benchmarks.md)
//	near_cache=on|off        on: Options.NearCache, so replays are served
//	                         from process memory (rueidis only: it implies
//	                         client=rueidis); off: the default
//	near_cache_bytes=N       the near cache's bound per connection to a
//	                         Redis node, in bytes (default 64 MiB)
//	coalesce=on|off          on: Options.Coalesce, operations that come
//	                         while a script call is in flight go out as one
//	                         batch (ignored on a cluster); off: the default
//	allow_eviction=on|off    on: Options.AllowEviction, unsafe: the store
//	                         works on a Redis that may evict its records (a
//	                         record evicted is a key forgotten: its work
//	                         runs again); off: the default, the store's
//	                         first call fails on such a Redis
//
// Each is given at most once, with a value: empty or repeated, it is an
// error. With rueidis the go-redis pool options (pool_size and the like)
// do not apply, and a URL that gives one is an error naming client=go-redis.
// opts may be nil; its NearCache and Coalesce are set from the URL, and
// its AllowEviction when the URL says allow_eviction=on.
func OpenURL(uri string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	u, err := storeOptions(uri)
	if err != nil {
		return nil, err
	}
	o.Coalesce = u.coalesce
	o.NearCache = u.nearCache
	o.AllowEviction = o.AllowEviction || u.allowEviction
	if !u.rueidis {
		client, err := ParseURL(u.rest)
		if err != nil {
			return nil, redact.AsWritten(err, uri)
		}
		s, err := New(client, &o)
		if err != nil {
			client.Close()
			return nil, err
		}
		s.closeClient = func() { client.Close() }
		return s, nil
	}
	opt, err := rueidisOption(u.rest)
	if err != nil {
		return nil, redact.AsWritten(err, uri)
	}
	if u.nearCache {
		opt.CacheSizeEachConn = u.cacheBytes
	} else {
		opt.DisableCache = true // no CLIENT TRACKING: nothing reads the cache
	}
	return openRueidis(opt, &o)
}

// CheckURL returns the error OpenURL would return for uri's form
// (wrapping ErrBadURL, with the reason), or nil, without connecting: a
// configuration checker's answer.
func CheckURL(uri string) error {
	u, err := storeOptions(uri)
	if err != nil {
		return err
	}
	if u.rueidis {
		_, err = rueidisOption(u.rest)
		return redact.AsWritten(err, uri)
	}
	c, err := ParseURL(u.rest)
	if err != nil {
		return redact.AsWritten(err, uri)
	}
	return c.Close() // it connects lazily: nothing was dialled
}

// defaultNearCacheBytes is OpenURL's near_cache_bytes by default.
const defaultNearCacheBytes = 64 << 20

// urlOptions are OpenURL's own options of a URL, and the rest of it, which
// the client reads.
type urlOptions struct {
	rest                         string
	rueidis, nearCache, coalesce bool
	allowEviction                bool
	cacheBytes                   int
}

// ownOptions are the query parameters OpenURL takes out of a URL.
var ownOptions = []string{"client", "near_cache", "near_cache_bytes", "coalesce", "allow_eviction"}

// storeOptions takes client, near_cache, near_cache_bytes, coalesce and
// allow_eviction out of uri's query.
func storeOptions(uri string) (urlOptions, error) {
	base, rawQuery, hasQuery := strings.Cut(uri, "?")
	if !hasQuery || !slices.ContainsFunc(ownOptions, func(o string) bool { return strings.Contains(rawQuery, o) }) {
		return urlOptions{rest: uri}, nil
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return urlOptions{}, badURL(uri, redactErr(fmt.Errorf("query: %w", err), uri))
	}
	// An own option given empty or twice is refused: it would otherwise
	// mean this package's default, or the first of two values, where the
	// caller (idem serve has defaults of its own for client and coalesce)
	// may have meant another.
	for _, o := range ownOptions {
		switch vs := q[o]; {
		case len(vs) > 1:
			return urlOptions{}, badURL(uri, fmt.Sprintf("%s is given %d times; give it once", o, len(vs)))
		case len(vs) == 1 && vs[0] == "":
			return urlOptions{}, badURL(uri, fmt.Sprintf("%s= is empty; give a value or leave the option out", o))
		}
	}
	onOff := func(name string) (bool, error) {
		switch v := q.Get(name); v {
		case "on":
			return true, nil
		case "", "off": // "": not given
			return false, nil
		default:
			return false, badURL(uri, fmt.Sprintf("%s=%q: want on or off", name, v))
		}
	}
	var u urlOptions
	if u.nearCache, err = onOff("near_cache"); err != nil {
		return urlOptions{}, err
	}
	if u.coalesce, err = onOff("coalesce"); err != nil {
		return urlOptions{}, err
	}
	if u.allowEviction, err = onOff("allow_eviction"); err != nil {
		return urlOptions{}, err
	}
	switch v := q.Get("client"); v {
	case "rueidis":
		u.rueidis = true
	case "go-redis", "": // "": not given
		if v != "" && u.nearCache {
			return urlOptions{}, badURL(uri, "near_cache=on with client=go-redis: the near cache is rueidis's")
		}
		u.rueidis = u.nearCache
	default:
		return urlOptions{}, badURL(uri, fmt.Sprintf("client=%q: want go-redis or rueidis", v))
	}
	u.cacheBytes = defaultNearCacheBytes
	if v := q.Get("near_cache_bytes"); v != "" {
		if u.cacheBytes, err = strconv.Atoi(v); err != nil || u.cacheBytes <= 0 {
			return urlOptions{}, badURL(uri, fmt.Sprintf("near_cache_bytes=%q: want a positive number of bytes", v))
		}
		if !u.nearCache {
			return urlOptions{}, badURL(uri, "near_cache_bytes without near_cache=on")
		}
	}
	u.rest = base
	if rest := urlquery.Without(rawQuery, ownOptions...); rest != "" {
		u.rest += "?" + rest
	}
	return u, nil
}

// goredisOnly are the options of go-redis's URL forms that a rueidis
// client has nothing to set from.
var goredisOnly = []string{"pool_size", "pool_timeout", "pool_fifo", "min_idle_conns", "max_idle_conns",
	"max_active_conns", "conn_max_idle_time", "conn_max_lifetime", "max_retries", "min_retry_backoff",
	"max_retry_backoff", "read_timeout", "write_timeout", "max_redirects", "read_only", "route_by_latency", "route_randomly"}

// rueidisOption turns a store URL into a rueidis client's options, from
// the go-redis options ParseURL's parsers make (so both clients read a URL
// alike).
func rueidisOption(uri string) (rueidis.ClientOption, error) {
	c, err := ParseURL(uri) // the checks and errors of ParseURL
	if err != nil {
		return rueidis.ClientOption{}, err
	}
	c.Close() // it connects lazily: nothing was dialled
	if _, rawQuery, ok := strings.Cut(uri, "?"); ok {
		q, _ := url.ParseQuery(rawQuery) // ParseURL parsed it
		for _, name := range goredisOnly {
			if q.Has(name) {
				return rueidis.ClientOption{}, badURL(uri, name+" is a go-redis pool option: rueidis pipelines every call on one connection per node; give client=go-redis to use it")
			}
		}
	}
	scheme, rest, _ := strings.Cut(uri, "://")
	var opt rueidis.ClientOption
	var dialTimeout time.Duration
	var tlsConfig *tls.Config
	switch {
	case strings.HasSuffix(scheme, "-sentinel"):
		o, err := parseSentinel(strings.TrimSuffix(scheme, "-sentinel"), rest)
		if err != nil {
			return opt, badURL(uri, redactErr(err, uri))
		}
		opt.InitAddress = o.SentinelAddrs
		opt.Sentinel = rueidis.SentinelOption{MasterSet: o.MasterName, Username: o.SentinelUsername,
			Password: o.SentinelPassword, TLSConfig: o.TLSConfig}
		opt.Sentinel.Dialer.Timeout = o.DialTimeout
		opt.Username, opt.Password, opt.SelectDB, opt.ClientName = o.Username, o.Password, o.DB, o.ClientName
		dialTimeout, tlsConfig = o.DialTimeout, o.TLSConfig
	case strings.HasSuffix(scheme, "-cluster"):
		o, err := parseCluster(strings.TrimSuffix(scheme, "-cluster"), rest)
		if err != nil {
			return opt, badURL(uri, redactErr(err, uri))
		}
		opt.InitAddress = o.Addrs
		opt.Username, opt.Password, opt.ClientName = o.Username, o.Password, o.ClientName
		dialTimeout, tlsConfig = o.DialTimeout, o.TLSConfig
	default:
		o, err := redis.ParseURL(uri)
		if err != nil {
			return opt, badURL(uri, redactErr(err, uri))
		}
		opt.InitAddress, opt.ForceSingleClient = []string{o.Addr}, true
		opt.Username, opt.Password, opt.SelectDB, opt.ClientName = o.Username, o.Password, o.DB, o.ClientName
		dialTimeout, tlsConfig = o.DialTimeout, o.TLSConfig
		if o.Network == "unix" {
			opt.DialCtxFn = func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
				return d.DialContext(ctx, "unix", addr)
			}
		}
	}
	opt.Dialer.Timeout, opt.TLSConfig = dialTimeout, tlsConfig
	return opt, nil
}

// openRueidis makes a rueidis client with opt, counting the near cache's
// invalidations, and a store on it that owns it.
func openRueidis(opt rueidis.ClientOption, o *Options) (*Store, error) {
	var near atomic.Pointer[nearCache] // set once the store exists; the hook runs on the client's goroutines
	// The hook only when there is a cache to count for: with
	// OnInvalidations set, rueidis starts each connection's writer and
	// reader goroutines at once, and every call is handed to one and back
	// from the other even where a caller alone could write and read
	// itself (one client; rueidis starts them anyway once calls overlap).
	if o.NearCache {
		opt.OnInvalidations = func(keys []rueidis.RedisMessage) {
			if n := near.Load(); n != nil {
				n.countInvalidations(keys)
			}
		}
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redisstore: rueidis client: %w", err)
	}
	s, err := NewRueidis(client, o)
	if err != nil {
		client.Close()
		return nil, err
	}
	near.Store(s.near)
	s.closeClient = client.Close
	return s, nil
}
