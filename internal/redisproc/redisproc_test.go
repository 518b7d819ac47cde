package redisproc_test

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testing.TB does, and kills it when t ends.
func startServer(t *testing.T, cfg redisproc.Config) *redisproc.Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Unavailable(t, "the redis-server program", err)
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := redisproc.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Kill crashes the server; Restart brings it back on the same port, empty.
func TestStartKillRestart(t *testing.T) {
	s := startServer(t, redisproc.Config{})
	c := client(t, s)
	ctx := t.Context()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	s.Kill() // harmless
	if s.Alive() {
		t.Fatal("Alive after Kill")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := s.Pause(); err == nil {
		t.Error("Pause of an exited server did not fail")
	}
	addr := s.Addr
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Addr != addr || !s.Alive() {
		t.Fatalf("after Restart: Addr %s (was %s), Alive %v", s.Addr, addr, s.Alive())
	}
	if err := s.Restart(ctx); err == nil {
		t.Error("Restart of a running server did not fail")
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after Restart: EXISTS k = %d, %v; want 0 (no persistence)", n, err)
	}
	if !strings.Contains(s.Log(1000), "Ready to accept connections") {
		t.Errorf("log has no start line:\n%s", s.Log(20))
	}
}

// A paused server keeps its socket but answers nothing until Resume.
func TestPauseResume(t *testing.T) {
	s := startServer(t, redisproc.Config{})
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	defer c.Close()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(t.Context()).Err(); err == nil {
		t.Fatal("a paused server answered PING")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := client(t, s).Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

// Env reaches the server's environment (the loader reports the missing
// preload on stderr, which goes to the log), and a fixed Port is used as
// given.
func TestStartEnvAndPort(t *testing.T) {
	first := startServer(t, redisproc.Config{})
	port := first.Port
	first.Kill()
	s := startServer(t, redisproc.Config{Port: port, Env: []string{"LD_PRELOAD=/nonexistent/redistopo-env-test.so"}})
	if s.Port != port || s.Addr != "127.0.0.1:"+strconv.Itoa(port) {
		t.Fatalf("Port %d, Addr %s; want port %d", s.Port, s.Addr, port)
	}
	if !strings.Contains(s.Log(1000), "redistopo-env-test.so") {
		t.Errorf("Env did not reach the server; log:\n%s", s.Log(20))
	}
}

// A server that cannot start is an error quoting its log, and leaves
// nothing running; a missing Dir is an error before anything starts.
func TestStartErrors(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Unavailable(t, "the redis-server program", err)
	}
	if _, err := redisproc.Start(t.Context(), redisproc.Config{}); err == nil {
		t.Error("Start without Dir did not fail")
	}
	// The server already on the port answers, but it is not the one started.
	other := startServer(t, redisproc.Config{})
	_, err := redisproc.Start(t.Context(), redisproc.Config{Dir: t.TempDir(), Port: other.Port})
	if err == nil || !strings.Contains(err.Error(), "exited at start") {
		t.Errorf("Start on a port another server holds: %v; want an exit at start", err)
	}
	_, err = redisproc.Start(t.Context(), redisproc.Config{Dir: t.TempDir(), Args: []string{"--no-such-directive", "1"}})
	if err == nil || !strings.Contains(err.Error(), "no-such-directive") {
		t.Errorf("Start with a bad argument: %v; want the server's complaint", err)
	}
}

// client returns a plain client of s, closed when t ends.
func client(t *testing.T, s *redisproc.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}
