package redisstore

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// OpenURL opens a store on a Redis store URL (the forms of ParseURL) with
// a client of its own, which the store's Close closes. On top of
// ParseURL's options it takes:
//
//	near_cache=on|off        on: a rueidis client and Options.NearCache, so
//	                         replays are served from process memory; off
//	                         (the default): a go-redis client, as ParseURL's
//	near_cache_bytes=N       the near cache's bound per connection to a
//	                         Redis node, in bytes (default 64 MiB)
//	coalesce=on|off          on: Options.Coalesce, operations that come
//	                         while a script call is in flight go out as one
//	                         batch (ignored on a cluster); off: the default
//
// With near_cache=on the go-redis pool options (pool_size and the like)
// do not apply: rueidis pipelines every call on one connection per node.
// opts may be nil; its NearCache and Coalesce are set from the URL.
func OpenURL(uri string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	rest, near, cacheBytes, coalesce, err := storeOptions(uri)
	if err != nil {
		return nil, err
	}
	o.Coalesce = coalesce
	if !near {
		o.NearCache = false
		client, err := ParseURL(rest)
		if err != nil {
			return nil, err
		}
		s, err := New(client, &o)
		if err != nil {
			client.Close()
			return nil, err
		}
		s.closeClient = func() { client.Close() }
		return s, nil
	}
	opt, err := rueidisOption(rest)
	if err != nil {
		return nil, err
	}
	opt.CacheSizeEachConn = cacheBytes
	o.NearCache = true
	return openRueidis(opt, &o)
}

// CheckURL returns the error OpenURL would return for uri's form
// (wrapping ErrBadURL, with the reason), or nil, without connecting: a
// configuration checker's answer.
func CheckURL(uri string) error {
	rest, near, _, _, err := storeOptions(uri)
	if err != nil {
		return err
	}
	if near {
		_, err = rueidisOption(rest)
		return err
	}
	c, err := ParseURL(rest)
	if err != nil {
		return err
	}
	return c.Close() // it connects lazily: nothing was dialled
}

// defaultNearCacheBytes is OpenURL's near_cache_bytes by default.
const defaultNearCacheBytes = 64 << 20

// storeOptions takes near_cache, near_cache_bytes and coalesce out of uri's query.
func storeOptions(uri string) (rest string, near bool, cacheBytes int, coalesce bool, err error) {
	base, rawQuery, hasQuery := strings.Cut(uri, "?")
	if !hasQuery || !strings.Contains(rawQuery, "near_cache") && !strings.Contains(rawQuery, "coalesce") {
		return uri, false, 0, false, nil
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", false, 0, false, badURL(uri, "query: "+err.Error())
	}
	onOff := func(name string) (bool, error) {
		switch v := q.Get(name); v {
		case "on":
			return true, nil
		case "", "off":
			return false, nil
		default:
			return false, badURL(uri, fmt.Sprintf("%s=%q: want on or off", name, v))
		}
	}
	if near, err = onOff("near_cache"); err != nil {
		return "", false, 0, false, err
	}
	if coalesce, err = onOff("coalesce"); err != nil {
		return "", false, 0, false, err
	}
	cacheBytes = defaultNearCacheBytes
	if v := q.Get("near_cache_bytes"); v != "" {
		if cacheBytes, err = strconv.Atoi(v); err != nil || cacheBytes <= 0 {
			return "", false, 0, false, badURL(uri, fmt.Sprintf("near_cache_bytes=%q: want a positive number of bytes", v))
		}
		if !near {
			return "", false, 0, false, badURL(uri, "near_cache_bytes without near_cache=on")
		}
	}
	q.Del("near_cache")
	q.Del("near_cache_bytes")
	q.Del("coalesce")
	if len(q) == 0 {
		return base, near, cacheBytes, coalesce, nil
	}
	return base + "?" + q.Encode(), near, cacheBytes, coalesce, nil
}

// rueidisOption turns a store URL into a rueidis client's options, from
// the go-redis options ParseURL's parsers make (so both clients read a URL
// alike).
func rueidisOption(uri string) (rueidis.ClientOption, error) {
	c, err := ParseURL(uri) // the checks and errors of ParseURL
	if err != nil {
		return rueidis.ClientOption{}, err
	}
	c.Close() // it connects lazily: nothing was dialled
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
	userHook := opt.OnInvalidations
	opt.OnInvalidations = func(keys []rueidis.RedisMessage) {
		if n := near.Load(); n != nil {
			n.countInvalidations(keys)
		}
		if userHook != nil {
			userHook(keys)
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
