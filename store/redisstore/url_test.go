package redisstore_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/store/redisstore"
	"github.com/redis/go-redis/v9"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		want string // "client" (*redis.Client) or "cluster"
		db   int
	}{
		{"redis://127.0.0.1:6379/2", "client", 2},
		{"rediss://user:pw@example.com", "client", 0},
		{"unix:///run/redis.sock?db=3", "client", 3},
		{"redis-sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3/mymaster", "client", 0},
		{"redis-sentinel://app:s%40cret@10.0.0.1/mymaster/4?dial_timeout=2s&sentinel_password=x", "client", 4},
		{"rediss-sentinel://[::1]:26379/mymaster", "client", 0},
		{"redis-cluster://10.0.0.1:7000,10.0.0.2:7001", "cluster", 0},
		{"rediss-cluster://u:p@node-1?pool_size=64&read_timeout=1s", "cluster", 0},
	} {
		c, err := redisstore.ParseURL(tc.uri)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.uri, err)
			continue
		}
		switch cc := c.(type) {
		case *redis.Client:
			if !cc.Options().ContextTimeoutEnabled {
				t.Errorf("ParseURL(%q): the client ignores context deadlines", tc.uri)
			}
			if tc.want != "client" || cc.Options().DB != tc.db {
				t.Errorf("ParseURL(%q) = a single-primary client on db %d; want %s on db %d", tc.uri, cc.Options().DB, tc.want, tc.db)
			}
		case *redis.ClusterClient:
			if !cc.Options().ContextTimeoutEnabled {
				t.Errorf("ParseURL(%q): the client ignores context deadlines", tc.uri)
			}
			if tc.want != "cluster" {
				t.Errorf("ParseURL(%q) = a cluster client; want %s", tc.uri, tc.want)
			}
		default:
			t.Errorf("ParseURL(%q) = %T", tc.uri, c)
		}
		c.Close()
	}
}

func TestParseURLSentinelCredentials(t *testing.T) {
	c, err := redisstore.ParseURL("redis-sentinel://app:s%40cret@h1,h2:26380/main/1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := c.(*redis.Client).Options()
	if o.Username != "app" || o.Password != "s@cret" || o.DB != 1 {
		t.Errorf("data-node credentials = %q/%q db %d; want app/s@cret db 1", o.Username, o.Password, o.DB)
	}
}

func TestParseURLErrors(t *testing.T) {
	for uri, want := range map[string]string{
		"":                                        "no scheme",
		"127.0.0.1:6379":                          "no scheme",
		"http://127.0.0.1":                        "unknown scheme",
		"redis-sentinel://h1:26379":               "no master name",
		"redis-sentinel://h1/master/zero":         "not a number",
		"redis-sentinel://h1/master/0/extra":      "more than /master/db",
		"redis-sentinel://h1/m?master_name=x":     "not in options",
		"redis-cluster://":                        "no host",
		"redis-cluster://u:topsecret@":            "no host",
		"redis-cluster://h1:7000/0":               "no path",
		"redis-cluster://h1:7000,,h2:7001":        "empty host",
		"redis-cluster://h1:port":                 "not a number",
		"redis-cluster://h1:70000":                "not a number",
		"redis-cluster://:7000":                   "no host name",
		"redis-cluster://h1?dial_timeout=soon":    "dial_timeout",
		"redis-cluster://h1?no_such_option=1":     "no_such_option",
		"redis://u:topsecret@h1:6379/notadb":      "invalid",
		"redis-sentinel://h1/m?pool_size=many":    "pool_size",
		"redis-sentinel://u:topsecret@h1/m?q=%zz": "query",
		"redis://u:topsecret@h1:6379/0?q=%zz":     "query", // go-redis alone would drop the pair and its option
		"redis://h1:6379/0?pool_size=3;x=1":       "query",
		"unix:///run/redis.sock?db=1&%zz=1":       "query",
		"redis-cluster://u:top%zzsecret@h1:7000":  "user or password",
		// go-redis reads redis://h/7?db=3 as db 3, while the URL shows /7.
		"redis://u:topsecret@h1:6379/7?db=3":       "/7 in the path and db=3",
		"redis://h1/7?db=7":                        "give it once",
		"rediss://h1/7/?db=":                       "/7 in the path and db=",
		"redis://h1/?db=3&db=4":                    "db is given 2 times",
		"unix:///run/redis.sock?db=1&db=2":         "db is given 2 times",
		"redis-sentinel://u:topsecret@h1/m/2?db=3": "/2 in the path and db=3",
		"redis-sentinel://h1/m?db=3&db=4":          "db is given 2 times",
	} {
		c, err := redisstore.ParseURL(uri)
		if err == nil {
			c.Close()
			t.Errorf("ParseURL(%q) succeeded; want an error about %q", uri, want)
			continue
		}
		if !errors.Is(err, redisstore.ErrBadURL) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q) = %v; want ErrBadURL about %q", uri, err, want)
		}
		if strings.Contains(err.Error(), "topsecret") || strings.Contains(err.Error(), "secret@") {
			t.Errorf("ParseURL(%q) error shows the password: %v", uri, err)
		}
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redis://h:1/0", "redis-sentinel://u:p@a,b:2/m/1?db=1", "redis-cluster://a:1,b?pool_size=2", "rediss-cluster://[::1]:1", "unix:///s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		c, err := redisstore.ParseURL(uri)
		if err != nil {
			if !errors.Is(err, redisstore.ErrBadURL) {
				t.Fatalf("ParseURL(%q) = %v, not wrapping ErrBadURL", uri, err)
			}
			return
		}
		c.Close()
	})
}

// A query that does not parse, where the URL has this package's own
// options, is refused without quoting the password: the parse error
// quotes the bad escape, which may be the password unescaped.
func TestOwnOptionsQueryErrorHidesThePassword(t *testing.T) {
	uri := "redis://u:%25zz@h1:6379/0?coalesce=%zz" // the password is %zz
	err := redisstore.CheckURL(uri)
	if err == nil || !errors.Is(err, redisstore.ErrBadURL) {
		t.Fatalf("CheckURL(%q) = %v; want ErrBadURL", uri, err)
	}
	_, reason, ok := strings.Cut(err.Error(), `": query: `)
	if !ok || strings.Contains(reason, "%zz") {
		t.Errorf("CheckURL(%q) = %v; want a query error that does not quote the password", uri, err)
	}
}

// A URL the client refuses is quoted as its user wrote it, with this
// package's own options (which the client never sees), and without its
// password.
func TestRefusalQuotesTheURLAsWritten(t *testing.T) {
	for _, uri := range []string{
		"redis://u:topsecret@h1:6379/0?coalesce=on&pool_size=abc&client=go-redis", // go-redis refuses
		"redis://u:topsecret@h1:6379/0?near_cache=on&dial_timeout=zz",             // rueidis: dial_timeout read as go-redis does
		"redis://u:topsecret@h1:6379/0?client=rueidis&pool_size=3",                // rueidis refuses a pool option
	} {
		want := strconv.Quote(strings.Replace(uri, "topsecret", "xxxxx", 1))
		check := redisstore.CheckURL(uri)
		_, open := redisstore.OpenURL(uri, nil)
		for name, err := range map[string]error{"CheckURL": check, "OpenURL": open} {
			if !errors.Is(err, redisstore.ErrBadURL) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "topsecret") {
				t.Errorf("%s(%q) = %v; want ErrBadURL quoting %s", name, uri, err, want)
			}
		}
	}
}
