package redisstore

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/idemkit/idem/internal/redact"
	"github.com/redis/go-redis/v9"
)

// ErrBadURL is returned by ParseURL, with the reason, for a store URL it
// cannot use.
var ErrBadURL = errors.New("redisstore: bad Redis URL")

// ParseURL returns a go-redis client for a Redis store URL, for commands
// and configuration files that name the store by one string. The forms:
//
//	redis://[user:password@]host[:port][/db][?options]    one server
//	rediss://...                                           the same over TLS
//	unix://[user:password@]/path/to/socket[?db=N&options]  one server, Unix socket
//	redis-sentinel://[user:password@]host[:port][,host[:port]...]/master[/db][?options]
//	rediss-sentinel://...                                  the same, TLS to every node
//	redis-cluster://[user:password@]host[:port][,host[:port]...][?options]
//	rediss-cluster://...                                   the same over TLS
//
// In the Sentinel forms the hosts are the Sentinels (default port 26379),
// master is the name they monitor, and the user and password are those of
// the Redis servers; the Sentinels' own credentials, when they have any,
// go in the options sentinel_username and sentinel_password. In the
// cluster form the hosts are some of the cluster's nodes (default port
// 6379); the client discovers the others. The options are those of
// go-redis's URL forms (dial_timeout=3s, read_timeout=2s, pool_size=64,
// max_retries=..., and for Sentinel db=N); an unknown option is an error,
// and so is db=N given twice or next to a database in the path
// (redis://host/7?db=3), which go-redis would read as db 3.
//
// The client honours context deadlines (go-redis ContextTimeoutEnabled):
// a call on a stalled server returns when its context ends, not when the
// read timeout does, so a lease's local deadline holds.
//
// Errors wrap ErrBadURL and never repeat the password. The client
// connects lazily: a reachable server is not checked here.
func ParseURL(uri string) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		return nil, badURL(uri, "no scheme: want redis://, rediss://, unix://, redis-sentinel:// or redis-cluster://")
	}
	switch scheme {
	case "redis", "rediss", "unix":
		// go-redis reads the query with url.URL.Query, which drops a pair
		// it cannot parse (a bad escape, a ';') without a word: its option
		// would be ignored. The other forms' parser refuses it; so does this.
		if _, rawQuery, ok := strings.Cut(rest, "?"); ok {
			if _, err := url.ParseQuery(rawQuery); err != nil {
				return nil, badURL(uri, redactErr(fmt.Errorf("query: %w", err), uri))
			}
		}
		o, err := redis.ParseURL(uri)
		if err != nil {
			return nil, badURL(uri, redactErr(err, uri))
		}
		if u, err := url.Parse(uri); err == nil { // redis.ParseURL parsed it
			pathDB := ""
			if scheme != "unix" { // a unix:// path is the socket's
				pathDB = strings.Trim(u.Path, "/")
			}
			if err := checkDB(u.Query(), pathDB); err != nil {
				return nil, badURL(uri, err.Error())
			}
		}
		o.ContextTimeoutEnabled = true
		return redis.NewClient(o), nil
	case "redis-sentinel", "rediss-sentinel":
		o, err := parseSentinel(strings.TrimSuffix(scheme, "-sentinel"), rest)
		if err != nil {
			return nil, badURL(uri, redactErr(err, uri))
		}
		o.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(o), nil
	case "redis-cluster", "rediss-cluster":
		o, err := parseCluster(strings.TrimSuffix(scheme, "-cluster"), rest)
		if err != nil {
			return nil, badURL(uri, redactErr(err, uri))
		}
		o.ContextTimeoutEnabled = true
		return redis.NewClusterClient(o), nil
	}
	return nil, badURL(uri, fmt.Sprintf("unknown scheme %q: want redis, rediss, unix, redis-sentinel, rediss-sentinel, redis-cluster or rediss-cluster", scheme))
}

// multiHost is a URL whose host part may list several host:port pairs,
// which net/url does not parse.
type multiHost struct {
	user  *url.Userinfo
	addrs []string
	path  []string // the path's segments
	query url.Values
}

func parseMultiHost(rest string, defaultPort string) (multiHost, error) {
	var m multiHost
	rest, rawQuery, _ := strings.Cut(rest, "?")
	var err error
	if m.query, err = url.ParseQuery(rawQuery); err != nil {
		return m, fmt.Errorf("query: %w", err)
	}
	authority, path, _ := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		u, err := url.Parse("redis://" + authority[:i+1] + "x")
		if err != nil {
			return m, errors.New("bad user or password (escape reserved characters with %XX)")
		}
		m.user, authority = u.User, authority[i+1:]
	}
	if authority == "" {
		return m, errors.New("no host")
	}
	for _, hp := range strings.Split(authority, ",") {
		if hp == "" {
			return m, errors.New("empty host in the host list")
		}
		if !strings.Contains(hp, ":") || strings.HasSuffix(hp, "]") {
			hp = net.JoinHostPort(strings.Trim(hp, "[]"), defaultPort)
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			return m, fmt.Errorf("host %q: %w", hp, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return m, fmt.Errorf("host %q: port %q is not a number from 1 to 65535", hp, port)
		}
		if host == "" {
			return m, fmt.Errorf("host %q has no host name", hp)
		}
		m.addrs = append(m.addrs, net.JoinHostPort(host, port))
	}
	for seg := range strings.SplitSeq(path, "/") {
		if seg != "" {
			m.path = append(m.path, seg)
		}
	}
	return m, nil
}

// goredisURL is m in go-redis's own URL form, which takes further hosts
// as addr options.
func (m multiHost) goredisURL(scheme string, path string) string {
	q := url.Values{}
	for k, v := range m.query {
		q[k] = v
	}
	for _, a := range m.addrs[1:] {
		q.Add("addr", a)
	}
	u := url.URL{Scheme: scheme, User: m.user, Host: m.addrs[0], Path: path, RawQuery: q.Encode()}
	return u.String()
}

func parseSentinel(scheme, rest string) (*redis.FailoverOptions, error) {
	m, err := parseMultiHost(rest, "26379")
	if err != nil {
		return nil, err
	}
	if len(m.path) == 0 {
		return nil, errors.New("no master name: want redis-sentinel://host:port,host:port/master[/db]")
	}
	if len(m.path) > 2 {
		return nil, errors.New("path has more than /master/db")
	}
	if m.query.Has("master_name") || m.query.Has("username") || m.query.Has("password") {
		return nil, errors.New("master_name, username and password go in the URL's path and user info, not in options")
	}
	sentinelUser, sentinelPassword := m.query.Get("sentinel_username"), m.query.Get("sentinel_password")
	m.query.Del("sentinel_username")
	m.query.Del("sentinel_password")
	if err := checkDB(m.query, ""); err != nil {
		return nil, err
	}
	m.query.Set("master_name", m.path[0])
	dataUser := m.user
	m.user = nil // go-redis takes the user info as the Sentinels' credentials
	path := ""
	if len(m.path) == 2 {
		if err := checkDB(m.query, m.path[1]); err != nil {
			return nil, err
		}
		if n, err := strconv.Atoi(m.path[1]); err != nil || n < 0 {
			return nil, fmt.Errorf("database %q is not a number", m.path[1])
		}
		path = "/" + m.path[1]
	}
	o, err := redis.ParseFailoverURL(m.goredisURL(scheme, path))
	if err != nil {
		return nil, err
	}
	if dataUser != nil {
		o.Username = dataUser.Username()
		o.Password, _ = dataUser.Password()
	}
	o.SentinelUsername, o.SentinelPassword = sentinelUser, sentinelPassword
	return o, nil
}

func parseCluster(scheme, rest string) (*redis.ClusterOptions, error) {
	m, err := parseMultiHost(rest, "6379")
	if err != nil {
		return nil, err
	}
	if len(m.path) > 0 {
		return nil, errors.New("a cluster URL has no path: Redis Cluster has only database 0")
	}
	return redis.ParseClusterURL(m.goredisURL(scheme, ""))
}

// checkDB refuses a db option that could name another database than the
// one the URL seems to: given twice (go-redis takes the last), or next to
// a database in the path, pathDB (go-redis takes the option:
// redis://h/7?db=3 wrote to database 3, while a reader of the URL, and
// idem serve --check-config, saw /7).
func checkDB(q url.Values, pathDB string) error {
	switch vs := q["db"]; {
	case len(vs) > 1:
		return fmt.Errorf("db is given %d times: give the database once", len(vs))
	case len(vs) == 1 && pathDB != "":
		return fmt.Errorf("the database is given twice, /%s in the path and db=%s: give it once, in the path", pathDB, vs[0])
	}
	return nil
}

// badURL returns an ErrBadURL error for uri, with its secrets hidden.
func badURL(uri, why string) error { return &redact.Error{Kind: ErrBadURL, URL: uri, Why: why} }

// redactErr returns err's text with the secrets of uri hidden: go-redis
// errors can quote the URL.
func redactErr(err error, uri string) string {
	msg := err.Error()
	for _, secret := range redact.Secrets(uri) {
		msg = strings.ReplaceAll(msg, secret, redact.Mask)
	}
	return msg
}
