package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store/redisstore"
)

// TestEvictionPolicy: the store reads the server's maxmemory-policy with
// either client, so that idem serve can refuse a Redis that would drop
// its records under memory pressure (an evicted UNKNOWN key ran again).
func TestEvictionPolicy(t *testing.T) {
	testenv.Redis(t) // skips (or fails under CI) without redis-server
	srv, err := redisproc.Start(t.Context(), redisproc.Config{Dir: t.TempDir(), Args: []string{"--maxmemory-policy", "volatile-lru"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)

	stores := clientStores(t, srv.Addr, nil)
	for name, s := range stores {
		if got, err := s.EvictionPolicy(t.Context()); err != nil || got != "volatile-lru" {
			t.Errorf("%s: EvictionPolicy = %q, %v; want volatile-lru", name, got, err)
		}
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	if err := admin.ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := stores["rueidis"].EvictionPolicy(t.Context()); err != nil || got != redisstore.NoEviction {
		t.Errorf("after CONFIG SET: EvictionPolicy = %q, %v; want %s", got, err, redisstore.NoEviction)
	}
}
