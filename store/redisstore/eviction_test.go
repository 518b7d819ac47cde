package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/redistopo"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// evictingRedis starts a private redis-server whose maxmemory-policy
// evicts keys with a TTL (every record has one) once it holds 4 MiB, and
// returns it with an admin client of it.
func evictingRedis(t *testing.T) (*redisproc.Server, *redis.Client) {
	t.Helper()
	testenv.Redis(t) // skips (or fails under CI) without redis-server
	srv, err := redisproc.Start(t.Context(), redisproc.Config{Dir: t.TempDir(),
		Args: []string{"--maxmemory", "4mb", "--maxmemory-policy", "volatile-lru"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	return srv, admin
}

// urlStores opens a store on the server at addr through OpenURL with
// each client, the URL ending in query (with its '&' or '?').
func urlStores(t *testing.T, addr, query string) map[string]*redisstore.Store {
	t.Helper()
	out := map[string]*redisstore.Store{}
	for _, client := range []string{"go-redis", "rueidis"} {
		s, err := redisstore.OpenURL("redis://"+addr+"/0?client="+client+query, &redisstore.Options{Prefix: testenv.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out["url "+client] = s
	}
	return out
}

// acquireOnce runs one Acquire of a fresh key on s.
func acquireOnce(t *testing.T, s *redisstore.Store) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := s.Acquire(ctx, acquireParams(testenv.Prefix(t)+"k", "o"))
	return err
}

// TestEvictingRedisRefused: a store on a Redis that may evict its records
// (volatile-lru with a maxmemory: a COMPLETED record, which has a TTL, is
// dropped under memory pressure and its redelivery runs the work again)
// fails its first call, through New, NewRueidis and OpenURL alike, with
// an error naming the policy and the fix; it works once the server says
// noeviction (maxmemory 0 does not do), and with Options.AllowEviction (the URL's
// allow_eviction=on) on the evicting server.
func TestEvictingRedisRefused(t *testing.T) {
	srv, admin := evictingRedis(t)

	refused := clientStores(t, srv.Addr, &redisstore.Options{Prefix: testenv.Prefix(t)})
	for name, s := range urlStores(t, srv.Addr, "") {
		refused[name] = s
	}
	allowed := clientStores(t, srv.Addr, &redisstore.Options{Prefix: testenv.Prefix(t), AllowEviction: true})
	for name, s := range urlStores(t, srv.Addr, "&allow_eviction=on") {
		allowed[name] = s
	}
	for name, s := range refused {
		err := acquireOnce(t, s)
		if !errors.Is(err, redisstore.ErrMayEvict) || !strings.Contains(err.Error(), "maxmemory-policy is volatile-lru") ||
			!strings.Contains(err.Error(), "maxmemory-policy noeviction") || !strings.Contains(err.Error(), "AllowEviction") {
			t.Errorf("%s: Acquire on a volatile-lru Redis = %v; want ErrMayEvict naming the policy, noeviction and AllowEviction", name, err)
		}
		// Every call, not only Acquire, and again: nothing was accepted.
		if _, err := s.Get(t.Context(), store.ID{Tenant: "t", Key: "k"}); !errors.Is(err, redisstore.ErrMayEvict) {
			t.Errorf("%s: Get after a refusal = %v; want ErrMayEvict", name, err)
		}
		if err := s.CheckEviction(t.Context()); !errors.Is(err, redisstore.ErrMayEvict) {
			t.Errorf("%s: CheckEviction = %v; want ErrMayEvict", name, err)
		}
	}
	for name, s := range allowed {
		if err := acquireOnce(t, s); err != nil {
			t.Errorf("%s with AllowEviction: Acquire = %v; want nil", name, err)
		}
	}

	// maxmemory 0 is no limit today, but one CONFIG SET maxmemory after
	// the check would start the evictions: only noeviction passes.
	if err := admin.ConfigSet(t.Context(), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := refused["go-redis"].CheckEviction(t.Context()); !errors.Is(err, redisstore.ErrMayEvict) {
		t.Errorf("volatile-lru with maxmemory 0: CheckEviction = %v; want ErrMayEvict", err)
	}
	if err := admin.ConfigSet(t.Context(), "maxmemory", "4mb").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(t.Context(), "maxmemory-policy", redisstore.NoEviction).Err(); err != nil {
		t.Fatal(err)
	}
	for name, s := range refused {
		if err := acquireOnce(t, s); err != nil {
			t.Errorf("%s after CONFIG SET maxmemory-policy noeviction: Acquire = %v; want nil", name, err)
		}
	}
}

// TestEvictionUnreadable: a server that refuses INFO (an ACL) cannot say
// that it does not evict: the store refuses, naming INFO and the
// opt-out, rather than accept it silently.
func TestEvictionUnreadable(t *testing.T) {
	srv, admin := evictingRedis(t)
	if err := admin.ConfigSet(t.Context(), "maxmemory-policy", redisstore.NoEviction).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	gr := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "noinfo", Password: "pw", ContextTimeoutEnabled: true})
	t.Cleanup(func() { gr.Close() })
	rd, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, Username: "noinfo", Password: "pw",
		ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rd.Close)
	viaGoredis, err := redisstore.New(gr, &redisstore.Options{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	viaRueidis, err := redisstore.NewRueidis(rd, &redisstore.Options{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*redisstore.Store{"go-redis": viaGoredis, "rueidis": viaRueidis} {
		if err := acquireOnce(t, s); !errors.Is(err, redisstore.ErrMayEvict) || !strings.Contains(err.Error(), "INFO") ||
			!strings.Contains(err.Error(), "AllowEviction") {
			t.Errorf("%s: Acquire with INFO refused = %v; want ErrMayEvict naming INFO and AllowEviction", name, err)
		}
	}
}

// TestClusterEviction: on Redis Cluster every primary is asked: one that
// evicts is refused, whichever slots it owns; a replica's own policy
// does not count (it evicts nothing of its own).
func TestClusterEviction(t *testing.T) {
	needTopology(t)
	cl := redistopo.StartCluster(t, 3, 1)
	primary, replicas, err := cl.Shard(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	set := func(node *redisproc.Server, maxmemory, policy string) {
		t.Helper()
		c := redistopo.Client(t, node)
		if err := c.ConfigSet(t.Context(), "maxmemory", maxmemory).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ConfigSet(t.Context(), "maxmemory-policy", policy).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rd, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rd.Close)
	stores := func() map[string]*redisstore.Store {
		viaGoredis, err := redisstore.New(cl.Client(t), &redisstore.Options{Prefix: testenv.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		viaRueidis, err := redisstore.NewRueidis(rd, &redisstore.Options{Prefix: testenv.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		return map[string]*redisstore.Store{"go-redis": viaGoredis, "rueidis": viaRueidis}
	}

	set(replicas[0], "4mb", "volatile-lru")
	for name, s := range stores() {
		if err := s.CheckEviction(t.Context()); err != nil {
			t.Errorf("%s: only a replica evicting: CheckEviction = %v; want nil", name, err)
		}
	}
	set(primary, "4mb", "allkeys-lru")
	for name, s := range stores() {
		if err := s.CheckEviction(t.Context()); !errors.Is(err, redisstore.ErrMayEvict) ||
			!strings.Contains(err.Error(), primary.Addr) || !strings.Contains(err.Error(), "allkeys-lru") {
			t.Errorf("%s: a primary with allkeys-lru: CheckEviction = %v; want ErrMayEvict naming %s and allkeys-lru", name, err, primary.Addr)
		}
	}
}
