package redisstore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
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

// pipelineGoroutines counts rueidis's connection writer goroutines.
func pipelineGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "rueidis.(*pipe)._backgroundWrite")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// awaitNoPipelineGoroutines waits, up to 10 s, for the writer goroutines
// of the clients earlier tests closed to end (rueidis ends them after
// Close returns), so that a count taken next is this test's alone.
func awaitNoPipelineGoroutines(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); pipelineGoroutines() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d rueidis writer goroutines of closed clients still run after 10 s", pipelineGoroutines())
		}
	}
}

// Without the near cache, a store opened by URL leaves rueidis to write
// and read a connection in the caller's goroutine while calls do not
// overlap: it used to set OnInvalidations always (to count the cache's
// invalidations), which makes rueidis hand every call to a writer
// goroutine and back from a reader, even for one caller.
func TestRueidisPipelineGoroutinesOnlyWithNearCache(t *testing.T) {
	for _, c := range []struct {
		query string
		want  bool
	}{{"?client=rueidis", false}, {"?near_cache=on", true}} {
		awaitNoPipelineGoroutines(t) // no other test runs meanwhile: none here is parallel
		s, err := redisstore.OpenURL(testenv.RedisURL()+c.query, &redisstore.Options{Prefix: testenv.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		// One caller, one call at a time, each with a deadline as the
		// engine gives it (rueidis queues a call that has none, for
		// its context to end it).
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		for i := range 3 {
			if _, err := s.Get(ctx, store.ID{Tenant: "t", Key: "k" + strconv.Itoa(i)}); err != nil && !errors.Is(err, store.ErrNotFound) {
				t.Fatal(err)
			}
		}
		cancel()
		if started := pipelineGoroutines() > 0; started != c.want {
			t.Errorf("OpenURL(%s): writer goroutines started = %v, want %v", c.query, started, c.want)
		}
		s.Close()
	}
}
