package lab

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// closedPort returns a loopback address that nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestLabStartsItsOwnRedis: on a machine where redis-server is installed
// but no Redis answers on the default address (a fresh Debian after
// apt-get install), the lab starts one of its own instead of dying with
// "connection refused", and kills it when it ends (issue 31 item 14).
func TestLabStartsItsOwnRedis(t *testing.T) {
	cfg := config(t) // PostgreSQL must answer; the Redis this names is not used
	defer func(old string) { defaultRedisURL = old }(defaultRedisURL)
	defaultRedisURL = "redis://" + closedPort(t) + "/0"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lb, err := newLab(ctx, Config{PostgresURL: cfg.PostgresURL})
	if err != nil {
		t.Fatal(err)
	}
	if lb.ownRedis == nil || lb.redis.Addr != lb.ownRedis.Addr {
		lb.close()
		t.Fatalf("the lab did not start its own Redis: uses %s", lb.redis.Addr)
	}
	if err := ping(ctx, lb.redis); err != nil {
		lb.close()
		t.Fatalf("the lab's own Redis does not answer: %v", err)
	}
	srv := lb.ownRedis
	lb.close()
	if srv.Alive() {
		t.Error("the lab's own Redis still runs after the lab ended")
	}
}

// TestLabSaysWhatItNeeds: a Redis named by --redis that does not answer,
// or a PostgreSQL that does not, is an error that names the server and
// says how to get one, not a bare "connection refused".
func TestLabSaysWhatItNeeds(t *testing.T) {
	cfg := config(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := closedPort(t)
	_, err := newLab(ctx, Config{RedisURL: "redis://" + addr + "/0", PostgresURL: cfg.PostgresURL})
	if err == nil || !strings.Contains(err.Error(), addr+" (--redis)") {
		t.Errorf("an unanswering --redis: got %v, want an error naming %s and --redis", err, addr)
	}
	// A query go-redis would read in part (it drops the pair it cannot
	// parse, and the option with it) is refused.
	_, err = newLab(ctx, Config{RedisURL: "redis://" + addr + "/0?pool_size=3;x=1", PostgresURL: cfg.PostgresURL})
	if err == nil || !strings.Contains(err.Error(), "query") {
		t.Errorf("a --redis whose query does not parse: got %v, want an error about its query", err)
	}
	_, err = newLab(ctx, Config{RedisURL: cfg.RedisURL, PostgresURL: "postgres://postgres@" + addr + "/test?connect_timeout=2"})
	if err == nil || !strings.Contains(err.Error(), "scripts/services.sh") || !strings.Contains(err.Error(), "--postgres") {
		t.Errorf("an unanswering PostgreSQL: got %v, want an error that says what the lab needs", err)
	}
}
