package storeurl_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storeurl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOpenRejectsBadURLs(t *testing.T) {
	for _, uri := range []string{"", "Memory", "memory://", "mongodb://x", "mongodb://u:secret@h/db", "file:///tmp/x",
		"redis://:secret@host:notaport", "redis-cluster://", "rediss-sentinel://:secret@/master?sentinel_password=secret",
		"redis://:secret@h/0?coalesce=yes", "redis://:secret@h/0+postgres://u:secret@h:notaport/db",
		"postgres://%zz", "postgres://u:secret@h:notaport/db", "postgresql://u:secret@h/db?sslmode=sometimes"} {
		_, closeStore, err := storeurl.Open(context.Background(), uri, nil)
		if err == nil {
			closeStore()
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
		s, closeStore, err := storeurl.Open(context.Background(), uri, nil)
		if err != nil {
			t.Errorf("Open(%q) = %v; want a store (connections are made lazily)", uri, err)
			continue
		}
		if _, ok := s.(*redisstore.Store); !ok {
			t.Errorf("Open(%q) = %T; want a *redisstore.Store", uri, s)
		}
		closeStore()
	}
}

// The library leaves coalescing to the URL, off by default as in
// redisstore.OpenURL (the gateway turns it on by default, not here).
func TestOpenCoalescesOnlyWhenTheURLSaysSo(t *testing.T) {
	for uri, want := range map[string]bool{"redis://127.0.0.1:1/0": false, "redis://127.0.0.1:1/0?coalesce=on": true} {
		s, closeStore, err := storeurl.Open(context.Background(), uri, nil)
		if err != nil {
			t.Fatalf("Open(%q): %v", uri, err)
		}
		_, on := s.(*redisstore.Store).CoalesceStats()
		closeStore()
		if on != want {
			t.Errorf("Open(%q) coalesces: %v; want %v", uri, on, want)
		}
	}
}

// Options.Coalesce is the default a URL's coalesce= overrides.
func TestOpenCoalesceOption(t *testing.T) {
	for uri, want := range map[string]bool{"redis://127.0.0.1:1/0": true, "redis://127.0.0.1:1/0?coalesce=off": false,
		"redis://127.0.0.1:1/0?dial_timeout=1s": true} {
		s, closeStore, err := storeurl.Open(context.Background(), uri, &storeurl.Options{Coalesce: true})
		if err != nil {
			t.Fatalf("Open(%q): %v", uri, err)
		}
		_, on := s.(*redisstore.Store).CoalesceStats()
		closeStore()
		if on != want {
			t.Errorf("Open(%q) with Options.Coalesce coalesces: %v; want %v", uri, on, want)
		}
	}
}

// The memory options bound the memory store, and are refused for another
// store rather than ignored.
func TestOpenMemoryOptions(t *testing.T) {
	opts := &storeurl.Options{MemoryLimit: 1 << 20, MemoryTenantShare: 1}
	s, closeStore, err := storeurl.Open(context.Background(), "memory", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if _, ok := s.(*memstore.Store); !ok {
		t.Fatalf("Open(memory) = %T; want a *memstore.Store", s)
	}
	if _, _, err := storeurl.Open(context.Background(), "memory", &storeurl.Options{MemoryTenantShare: 2}); err == nil {
		t.Error("Open(memory) took a tenant share of 2")
	}
	if _, _, err := storeurl.Open(context.Background(), "redis://127.0.0.1:1/0", opts); err == nil || !strings.Contains(err.Error(), "memory store only") {
		t.Errorf("Open(redis://) with memory options = %v; want an error naming the memory store", err)
	}
}

// The PostgreSQL and layered forms connect, migrate and answer.
func TestOpenPostgresAndLayered(t *testing.T) {
	ctx := context.Background()
	for uri, want := range map[string]string{
		testenv.DatabaseURL():                            "*pgstore.Store",
		testenv.RedisURL() + "+" + testenv.DatabaseURL(): "*layered.Store",
	} {
		s, closeStore, err := storeurl.Open(ctx, uri, nil)
		if err != nil {
			testenv.Unavailable(t, uri, err)
		}
		if got := fmt.Sprintf("%T", s); got != want {
			t.Errorf("Open(%q) = %s; want %s", uri, got, want)
		}
		if _, err := s.Get(ctx, store.ID{Tenant: "storeurl", Key: rand.Text()}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Open(%q): Get of a new key = %v; want ErrNotFound", uri, err)
		}
		closeStore()
	}
}
