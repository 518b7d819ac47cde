package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestTracesCoverAcquireUpstreamAndFinalize(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	store, _ := memstore.New(nil)
	u, _ := url.Parse(up.URL)
	g, err := New(Config{Upstream: u, Store: store, Tracer: tp.Tracer("test"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/x", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "traced")
	req.Header.Set("Authorization", "Bearer traced")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	root, ok := spans["idem.request POST"]
	if !ok {
		t.Fatalf("no request span among %v", names(spans))
	}
	for _, name := range []string{"idem.acquire", "idem.upstream", "idem.complete"} {
		s, ok := spans[name]
		if !ok {
			t.Fatalf("no %s span among %v", name, names(spans))
		}
		if s.SpanContext.TraceID() != root.SpanContext.TraceID() {
			t.Errorf("%s is not in the request's trace", name)
		}
	}
}

func names(m map[string]tracetest.SpanStub) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Every bad --store value is ErrStoreURI, without its password: one URI
// for each way storeurl refuses one (its tests hold the full list), and
// the memory options given for another store.
func TestOpenStoreRejectsBadURIs(t *testing.T) {
	for _, c := range []struct {
		uri  string
		opts *StoreOptions
	}{
		{"mongodb://u:secret@h/db", nil},
		{"redis://:secret@host:notaport", nil},
		{"rediss-sentinel://:secret@/master?sentinel_password=secret", nil},
		{"postgres://u:secret@h:notaport/db", nil},
		{"redis://:secret@127.0.0.1:1/0", &StoreOptions{MemoryLimit: 1 << 20}},
	} {
		_, closeStore, err := OpenStore(context.Background(), c.uri, c.opts)
		if err == nil {
			closeStore()
			t.Errorf("OpenStore(%q) succeeded", c.uri)
			continue
		}
		if !errors.Is(err, ErrStoreURI) {
			t.Errorf("OpenStore(%q) = %v; want ErrStoreURI", c.uri, err)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("OpenStore(%q) echoed the password: %v", c.uri, err)
		}
	}
}

// An empty --store is the memory store, as the flag's default says
// (storeurl refuses an empty URL).
func TestOpenStoreEmptyIsMemory(t *testing.T) {
	store, closeStore, err := OpenStore(context.Background(), "", &StoreOptions{MemoryLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if _, ok := store.(*memstore.Store); !ok {
		t.Errorf("OpenStore(\"\") = %T; want a *memstore.Store", store)
	}
}

// withQuery adds query to uri's query.
func withQuery(uri, query string) string {
	if strings.Contains(uri, "?") {
		return uri + "&" + query
	}
	return uri + "?" + query
}

// The gateway's Redis store coalesces its scripts unless the URI says
// coalesce=off (storeurl's default is off); a cluster ignores the option.
// The forms without a server here name client=go-redis, which dials at the
// first call (rueidis, the default, dials at open).
func TestOpenStoreCoalescesByDefault(t *testing.T) {
	for _, c := range []struct {
		uri  string
		want bool
	}{
		{testenv.RedisURL(), true},
		{withQuery(testenv.RedisURL(), "dial_timeout=1s"), true},
		{withQuery(testenv.RedisURL(), "coalesce=off"), false},
		{withQuery(testenv.RedisURL(), "dial_timeout=1s&coalesce=off"), false},
		{"redis://127.0.0.1:1/0?client=go-redis", true},
		{"redis://127.0.0.1:1/0?client=go-redis&coalesce=off", false},
		{"rediss://127.0.0.1:1/0?client=go-redis", true},
		{"unix:///nonexistent/redis.sock?client=go-redis", true},
		{"redis-sentinel://127.0.0.1:1,127.0.0.1:2/mymaster?client=go-redis", true},
		{"redis-cluster://127.0.0.1:1?client=go-redis", false},
	} {
		store, closeStore, err := OpenStore(context.Background(), c.uri, nil)
		if err != nil {
			t.Fatalf("OpenStore(%q): %v", c.uri, err)
		}
		_, on := store.(*redisstore.Store).CoalesceStats()
		closeStore()
		if on != c.want {
			t.Errorf("OpenStore(%q) coalesces: %v; want %v", c.uri, on, c.want)
		}
	}
}

// An audit: --store 'redis://127.0.0.1:6379/7?db=3&prefix=x' was
// accepted, --check-config showed /7, and the keys went to database 3
// (go-redis's reading, which both clients share). A db option next to a
// database in the path, or given twice, is refused before any
// connection, under either client.
func TestStoreDatabaseGivenOnce(t *testing.T) {
	for _, uri := range []string{"redis://127.0.0.1:6379/7?db=3&prefix=x", "redis://127.0.0.1:6379/7?db=3&prefix=x&client=go-redis",
		"redis://127.0.0.1:6379/7?db=7", "redis://127.0.0.1:6379/7?client=go-redis&db=7", "redis://127.0.0.1:6379?db=3&db=4&client=go-redis",
		"redis://127.0.0.1:6379/7?db=3+postgres://u@127.0.0.1/test", "redis-sentinel://127.0.0.1:26379/m/2?db=3"} {
		_, _, err := OpenStore(context.Background(), uri, nil)
		for _, err := range []error{CheckStore(uri, nil), err} {
			if !errors.Is(err, ErrStoreURI) || !strings.Contains(err.Error(), "give") || !strings.Contains(err.Error(), "db") {
				t.Errorf("the store %s = %v; want ErrStoreURI: give the database once", uri, err)
			}
		}
	}
	for _, uri := range []string{"redis://127.0.0.1:6379/7?prefix=x", "redis://127.0.0.1:6379?db=3&prefix=x", "redis://127.0.0.1:6379/?db=3"} {
		if err := CheckStore(uri, nil); err != nil {
			t.Errorf("CheckStore(%s) = %v; want nil", uri, err)
		}
	}
}

// The gateway's Redis client is rueidis unless the URI says
// client=go-redis: rueidis dials at open, and refuses go-redis's pool
// options with an error that names client=go-redis, before it connects.
func TestOpenStoreRueidisByDefault(t *testing.T) {
	// open is OpenStore's error; a store it opened is closed.
	open := func(uri string) error {
		_, closeStore, err := OpenStore(context.Background(), uri, nil)
		if err == nil {
			closeStore()
		}
		return err
	}
	if err := open("redis://127.0.0.1:1/0"); err == nil || !strings.Contains(err.Error(), "rueidis client: dial") {
		t.Errorf("OpenStore of a Redis that is down = %v; want rueidis's dial error", err)
	}
	pooled := withQuery(testenv.RedisURL(), "pool_size=4")
	for _, err := range []error{CheckStore(pooled, nil), open(pooled)} {
		if !errors.Is(err, ErrStoreURI) || !strings.Contains(err.Error(), "client=go-redis") {
			t.Errorf("a URI with pool_size and no client= = %v; want ErrStoreURI naming client=go-redis", err)
		}
	}
	for _, uri := range []string{withQuery(testenv.RedisURL(), "client=go-redis&pool_size=4"), "redis://127.0.0.1:1/0?client=go-redis"} {
		if err := open(uri); err != nil {
			t.Fatalf("OpenStore(%q) = %v; want go-redis's store, which dials at the first call", uri, err)
		}
	}
}
