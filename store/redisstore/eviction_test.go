package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

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

	gr := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { gr.Close() })
	viaGoredis, err := redisstore.New(gr, nil)
	if err != nil {
		t.Fatal(err)
	}
	ru, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ru.Close)
	viaRueidis, err := redisstore.NewRueidis(ru, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*redisstore.Store{"go-redis": viaGoredis, "rueidis": viaRueidis} {
		if got, err := s.EvictionPolicy(t.Context()); err != nil || got != "volatile-lru" {
			t.Errorf("%s: EvictionPolicy = %q, %v; want volatile-lru", name, got, err)
		}
	}
	if err := gr.ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := viaRueidis.EvictionPolicy(t.Context()); err != nil || got != redisstore.NoEviction {
		t.Errorf("after CONFIG SET: EvictionPolicy = %q, %v; want %s", got, err, redisstore.NoEviction)
	}
}
