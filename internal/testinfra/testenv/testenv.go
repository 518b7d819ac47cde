// Package testenv connects tests to the real servers they need: Redis and
// PostgreSQL on this machine, or where IDEM_TEST_REDIS_URL and
// IDEM_TEST_DATABASE_URL point. Without CI a missing server skips the test;
// with CI=true it fails it, so a missing server can never pass as green.
package testenv

import (
	"cmp"
	"context"
	"crypto/rand"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisURL returns the Redis server for tests.
func RedisURL() string { return envOr("IDEM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0") }

// envOr returns the environment variable name, or def when it is unset or empty.
func envOr(name, def string) string { return cmp.Or(os.Getenv(name), def) }

// Redis returns a client of the test Redis server, closed when t ends.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("testenv: IDEM_TEST_REDIS_URL: %v", err)
	}
	opts.PoolSize = 128
	opts.ContextTimeoutEnabled = true // redisstore.New requires it
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		Unavailable(t, "Redis at "+RedisURL(), err)
	}
	return c
}

// Unavailable skips t because a server it needs is down, or fails it under CI.
func Unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("testenv: %s is unreachable (%v); CI=true needs it: run scripts/test.sh, which starts it", what, err)
	}
	t.Skipf("testenv: %s is unreachable (%v); run scripts/test.sh to start it", what, err)
}

// Prefix returns a prefix for the keys of one test that no other test or
// run shares.
func Prefix(t testing.TB) string {
	name := strings.NewReplacer("/", ".", " ", "_", "{", "(", "}", ")").Replace(t.Name())
	return "idemtest:" + name + ":" + rand.Text()[:8] + ":"
}

// ProcessCPU returns the CPU time this process has used, user and system
// (getrusage): a benchmark's cost per operation when its servers are
// other processes, steadier than ns/op on a shared machine.
func ProcessCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
