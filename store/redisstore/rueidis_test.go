package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storetest"
)

// rueidisClient returns a rueidis client of the test Redis server, closed
// when t ends.
func rueidisClient(t testing.TB) rueidis.Client {
	t.Helper()
	opt, err := rueidis.ParseURL(testenv.RedisURL())
	if err != nil {
		t.Fatalf("IDEM_TEST_REDIS_URL: %v", err)
	}
	opt.DisableCache = true // client-side caching needs RESP3 tracking, which idem does not use
	c, err := rueidis.NewClient(opt)
	if err != nil {
		testenv.Unavailable(t, "Redis at "+testenv.RedisURL(), err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		testenv.Unavailable(t, "Redis at "+testenv.RedisURL(), err)
	}
	return c
}

func TestConformanceRueidis(t *testing.T) {
	client := rueidisClient(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) (store.Store, func(time.Duration)) {
			s, err := redisstore.NewRueidis(client, &redisstore.Options{Prefix: testenv.Prefix(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s, storetest.Sleep // Redis keeps real time
		},
	})
}

func TestNewRueidisRejectsBadOptions(t *testing.T) {
	if _, err := redisstore.NewRueidis(nil, nil); err == nil {
		t.Error("NewRueidis accepted a nil client")
	}
	if _, err := redisstore.NewRueidis(rueidisClient(t), &redisstore.Options{Prefix: "a}b"}); err == nil {
		t.Error("NewRueidis accepted a prefix with a brace")
	}
	if _, err := redisstore.NewRueidis(rueidisClient(t), &redisstore.Options{ReplicaAcks: 1}); err == nil || !strings.Contains(err.Error(), "go-redis") {
		t.Errorf("NewRueidis with ReplicaAcks = %v; want a refusal that names the client to use", err)
	}
}

// TestScriptsReloadAfterFlush: after SCRIPT FLUSH (a restart or failover
// to a server that never saw the scripts) EVALSHA answers NOSCRIPT and both
// clients must fall back to EVAL.
func TestScriptsReloadAfterFlush(t *testing.T) {
	ctx := context.Background()
	goredis := testenv.Redis(t)
	stores := map[string]func() (store.Store, error){
		"go-redis": func() (store.Store, error) {
			return redisstore.New(goredis, &redisstore.Options{Prefix: testenv.Prefix(t)})
		},
		"rueidis": func() (store.Store, error) {
			return redisstore.NewRueidis(rueidisClient(t), &redisstore.Options{Prefix: testenv.Prefix(t)})
		},
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			s, err := newStore()
			if err != nil {
				t.Fatal(err)
			}
			if err := goredis.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			id := store.ID{Tenant: "t", Key: "after-flush"}
			res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", Fingerprint: "f", LeaseDuration: time.Minute})
			if err != nil || !res.Acquired {
				t.Fatalf("Acquire after SCRIPT FLUSH = %+v, %v; want acquired", res, err)
			}
		})
	}
}
