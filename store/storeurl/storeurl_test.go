package storeurl_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/layered"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storeurl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOpenRejectsBadURLs(t *testing.T) {
	for _, uri := range []string{"", "Memory", "memory://", "mongodb://x", "mongodb://u:secret@h/db", "file:///tmp/x",
		"redis://:secret@host:notaport", "redis-cluster://", "rediss-sentinel://:secret@/master?sentinel_password=secret",
		"redis://:secret@h/0?coalesce=yes", "redis://:secret@h/0+postgres://u:secret@h:notaport/db",
		"postgres://%zz", "postgres://u:secret@h:notaport/db", "postgresql://u:secret@h/db?sslmode=sometimes"} {
		opened, err := storeurl.Open(context.Background(), uri, nil)
		if err == nil {
			opened.Close()
			t.Errorf("Open(%q) succeeded", uri)
			continue
		}
		if !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Open(%q) = %v; want ErrBadURL", uri, err)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q) echoed the password: %v", uri, err)
		}
	}
}

func TestOpenTakesEveryRedisForm(t *testing.T) {
	for _, uri := range []string{"redis://127.0.0.1:1/0", "rediss://127.0.0.1:1/0", "unix:///nonexistent/redis.sock",
		"redis-sentinel://127.0.0.1:1/mymaster", "rediss-sentinel://127.0.0.1:1/mymaster", "redis-cluster://127.0.0.1:1", "rediss-cluster://127.0.0.1:1"} {
		s, err := storeurl.Open(context.Background(), uri, nil)
		if err != nil {
			t.Errorf("Open(%q) = %v; want a store (connections are made lazily)", uri, err)
			continue
		}
		if _, ok := s.(*redisstore.Store); !ok {
			t.Errorf("Open(%q) = %T; want a *redisstore.Store", uri, s)
		}
		s.Close()
	}
}

// The library leaves coalescing to the URL, off by default as in
// redisstore.OpenURL (the gateway turns it on by default, not here).
func TestOpenCoalescesOnlyWhenTheURLSaysSo(t *testing.T) {
	for uri, want := range map[string]bool{"redis://127.0.0.1:1/0": false, "redis://127.0.0.1:1/0?coalesce=on": true} {
		s, err := storeurl.Open(context.Background(), uri, nil)
		if err != nil {
			t.Fatalf("Open(%q): %v", uri, err)
		}
		_, on := s.(*redisstore.Store).CoalesceStats()
		s.Close()
		if on != want {
			t.Errorf("Open(%q) coalesces: %v; want %v", uri, on, want)
		}
	}
}

// Options.Coalesce is the default a URL's coalesce= overrides.
func TestOpenCoalesceOption(t *testing.T) {
	for uri, want := range map[string]bool{"redis://127.0.0.1:1/0": true, "redis://127.0.0.1:1/0?coalesce=off": false,
		"redis://127.0.0.1:1/0?dial_timeout=1s": true} {
		s, err := storeurl.Open(context.Background(), uri, &storeurl.Options{Coalesce: true})
		if err != nil {
			t.Fatalf("Open(%q): %v", uri, err)
		}
		_, on := s.(*redisstore.Store).CoalesceStats()
		s.Close()
		if on != want {
			t.Errorf("Open(%q) with Options.Coalesce coalesces: %v; want %v", uri, on, want)
		}
	}
}

// An error quotes the URL as its user wrote it: the defaults of
// Options.Coalesce and Options.Rueidis go into its query only after it
// is checked, and the options that storeurl and redisstore take out of it
// (prefix=, client=, ...) stay in the quote, in their place.
func TestBadURLQuotedAsWritten(t *testing.T) {
	opts := &storeurl.Options{Coalesce: true, Rueidis: true}
	for _, tc := range []struct{ uri, quoted string }{
		{"redis://127.0.0.1:1/0?near_cache=", ""},
		{"redis://127.0.0.1:1/0?coalesce=", ""},
		{"redis://127.0.0.1:1/0?prefix=p&client=", ""},
		{"redis://127.0.0.1:1/0?prefix=p&near_cache=&client=rueidis", ""},
		{"redis://u:pw@127.0.0.1:1/0?prefix=p&coalesce=on&pool_size=abc&client=go-redis", "redis://u:xxxxx@127.0.0.1:1/0?prefix=p&coalesce=on&pool_size=abc&client=go-redis"},
		{"redis://127.0.0.1:1/0?prefix=p&pool_size=3", ""}, // refused by the default client, rueidis
		// The layered form quotes its Redis part.
		{"redis://127.0.0.1:1/0?prefix=p&pool_size=x+postgres://127.0.0.1/test", "redis://127.0.0.1:1/0?prefix=p&pool_size=x"},
	} {
		quoted := cmp.Or(tc.quoted, tc.uri)
		for name, err := range map[string]error{"Check": storeurl.Check(tc.uri, opts), "Open": open(tc.uri, opts)} {
			if !errors.Is(err, storeurl.ErrBadURL) || !strings.Contains(err.Error(), strconv.Quote(quoted)+": ") {
				t.Errorf("%s(%q) = %v; want ErrBadURL quoting %q", name, tc.uri, err, quoted)
			}
		}
	}
}

func open(uri string, opts *storeurl.Options) error {
	s, err := storeurl.Open(context.Background(), uri, opts)
	if err == nil {
		s.Close()
	}
	return err
}

// The memory options bound the memory store, and are refused for another
// store rather than ignored.
func TestOpenMemoryOptions(t *testing.T) {
	opts := &storeurl.Options{MemoryLimit: 1 << 20, MemoryTenantShare: 1}
	s, err := storeurl.Open(context.Background(), "memory", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*memstore.Store); !ok {
		t.Fatalf("Open(memory) = %T; want a *memstore.Store", s)
	}
	if _, err := storeurl.Open(context.Background(), "memory", &storeurl.Options{MemoryTenantShare: 2}); err == nil {
		t.Error("Open(memory) took a tenant share of 2")
	}
	if _, err := storeurl.Open(context.Background(), "redis://127.0.0.1:1/0", opts); err == nil || !strings.Contains(err.Error(), "memory store only") {
		t.Errorf("Open(redis://) with memory options = %v; want an error naming the memory store", err)
	}
}

// NoMigrate is refused for a store without PostgreSQL tables rather than
// ignored: Check answers without connecting.
func TestNoMigrateNeedsPostgres(t *testing.T) {
	for _, uri := range []string{"memory", "redis://127.0.0.1:1/0"} {
		if err := storeurl.Check(uri, &storeurl.Options{NoMigrate: true}); err == nil || !strings.Contains(err.Error(), "NoMigrate applies to a PostgreSQL store only") {
			t.Errorf("Check(%s) with NoMigrate = %v; want it refused", uri, err)
		}
	}
	for _, uri := range []string{"postgres://127.0.0.1:1/db", "redis://127.0.0.1:1/0+postgres://127.0.0.1:1/db"} {
		if err := storeurl.Check(uri, &storeurl.Options{NoMigrate: true}); err != nil {
			t.Errorf("Check(%s) with NoMigrate = %v; want it accepted", uri, err)
		}
	}
}

// The PostgreSQL and layered forms connect, migrate and answer.
func TestOpenPostgresAndLayered(t *testing.T) {
	ctx := context.Background()
	for _, uri := range []string{testenv.DatabaseURL(), testenv.RedisURL() + "+" + testenv.DatabaseURL()} {
		s, err := storeurl.Open(ctx, uri, nil)
		if err != nil {
			testenv.Unavailable(t, uri, err)
		}
		if _, err := s.Get(ctx, store.ID{Tenant: "storeurl", Key: rand.Text()}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Open(%q): Get of a new key = %v; want ErrNotFound", uri, err)
		}
		s.Close()
	}
}

// withParam adds name=value to uri's query.
func withParam(uri, name, value string) string {
	sep := "?"
	if strings.Contains(uri, "?") {
		sep = "&"
	}
	return uri + sep + name + "=" + url.QueryEscape(value)
}

// TestOpenSchemaAndPrefix (issue 32 item 9): a URL names the PostgreSQL
// schema (?schema=) and the Redis key prefix (?prefix=, the mirror's in
// the layered form) its store keeps its records under, as pgstore.Options
// and redisstore.Options do in code; a bad or repeated one is ErrBadURL.
func TestOpenSchemaAndPrefix(t *testing.T) {
	ctx := context.Background()
	pool, schema := testenv.Postgres(t) // an empty schema of this test's own
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	run := func(uri, key string) {
		t.Helper()
		s, err := storeurl.Open(ctx, uri, nil)
		if err != nil {
			t.Fatalf("Open(%q): %v", uri, err)
		}
		defer s.Close()
		e, err := idem.New(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.Do(ctx, idem.Request{Tenant: "storeurl", Key: key, NoFingerprint: true},
			func(context.Context, *idem.Lease) ([]byte, error) { return []byte("ok"), nil }); err != nil {
			t.Fatalf("Do on %q: %v", uri, err)
		}
	}
	rows := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".records").Scan(&n); err != nil {
			t.Fatalf("the schema's records: %v", err)
		}
		return n
	}
	mirrored := func() int {
		keys, err := rdb.Keys(ctx, prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	}

	run(withParam(testenv.DatabaseURL(), "schema", schema), "in-schema")
	if n := rows(); n != 1 {
		t.Fatalf("%s.records holds %d rows after one key; want 1", schema, n)
	}
	run(withParam(testenv.RedisURL(), "prefix", prefix), "in-prefix")
	if n := mirrored(); n == 0 {
		t.Fatalf("no Redis key under the prefix %q after one key", prefix)
	}
	before := mirrored()
	run(withParam(testenv.RedisURL(), "prefix", prefix+"mirror:")+"+"+withParam(testenv.DatabaseURL(), "schema", schema), "layered")
	if rows() != 2 || mirrored() <= before {
		t.Fatalf("layered: %d rows in %s, %d Redis keys under the prefix (were %d); want the row in the schema and the mirror under the prefix", rows(), schema, mirrored(), before)
	}
	for _, uri := range []string{
		withParam(testenv.DatabaseURL(), "schema", "Not A Schema"),
		withParam(withParam(testenv.DatabaseURL(), "schema", schema), "schema", schema),
		withParam(testenv.RedisURL(), "prefix", ""),
	} {
		if s, err := storeurl.Open(ctx, uri, nil); !errors.Is(err, storeurl.ErrBadURL) {
			if err == nil {
				s.Close()
			}
			t.Errorf("Open(%q) = %v; want ErrBadURL", uri, err)
		}
	}
}

// Every store has Close, which releases what the store itself opened
// (issue 32 item 9: one way to close every store): a store Open made
// from a URL owns its connections, and after Close it answers no more.
func TestEveryStoreCloses(t *testing.T) {
	for _, s := range []interface{ Close() error }{(*memstore.Store)(nil), (*redisstore.Store)(nil), (*pgstore.Store)(nil), (*layered.Store)(nil)} {
		_ = s // each type has Close (this does not compile otherwise)
	}
	s, err := storeurl.Open(context.Background(), testenv.RedisURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), store.ID{Key: "k"}); err == nil || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after Close = %v; want the closed client's error", err)
	}
}

// Options.Rueidis is the client a URL's client= overrides: rueidis
// refuses go-redis's pool options, which go-redis, the default without
// it, takes.
func TestOpenRueidisOption(t *testing.T) {
	pooled := "redis://127.0.0.1:1/0?pool_size=4"
	for _, c := range []struct {
		uri     string
		rueidis bool
		wantErr bool
	}{
		{pooled, false, false},
		{pooled, true, true},
		{pooled + "&client=go-redis", true, false},
	} {
		err := storeurl.Check(c.uri, &storeurl.Options{Rueidis: c.rueidis})
		if (err != nil) != c.wantErr || (err != nil && (!errors.Is(err, storeurl.ErrBadURL) || !strings.Contains(err.Error(), "client=go-redis"))) {
			t.Errorf("Check(%q) with Rueidis %v = %v; want an error naming client=go-redis: %v", c.uri, c.rueidis, err, c.wantErr)
		}
	}
}
