// Package redistopo starts throwaway Redis topologies for tests: a
// standalone node, a Redis Cluster, and a primary with replicas watched by
// Sentinels. Every server is a process internal/redisproc starts on a
// loopback port, and it never signals a process it did not start.
//
// The test helpers (StartNode, StartCluster, StartSentinel) put each server
// in a temporary directory of the test and stop it (SIGKILL) in t.Cleanup.
// When the redis-server or redis-cli binary is missing, the test is
// skipped, or failed under CI=true (see testenv.Unavailable).
package redistopo

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/redis/go-redis/v9"
)

// Client returns a plain client of the server s, closed when t ends.
func Client(t testing.TB, s *Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// binaries checks that the Redis programs a topology needs are installed.
func binaries(t testing.TB, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err != nil {
			testenv.Unavailable(t, "the "+name+" program (Debian: apt-get install redis-server)", err)
		}
	}
}

// start starts a server as cfg says, in the directory name under a
// temporary directory of t, and kills it when t ends.
func start(t testing.TB, name string, cfg redisproc.Config) *Server {
	t.Helper()
	cfg.Dir = filepath.Join(t.TempDir(), name)
	s, err := redisproc.Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("redistopo: start %s: %v", name, err)
	}
	t.Cleanup(s.Kill)
	return s
}

// startTimeout bounds how long a topology may take to settle (cluster
// state ok, replicas in sync).
const startTimeout = 20 * time.Second

// waitFor polls cond until it holds, failing t after startTimeout.
func waitFor(t testing.TB, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok, err := cond(ctx)
		cancel()
		if ok {
			return
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redistopo: %s did not happen within %v (last error: %v)", what, startTimeout, lastErr)
}

// StartNode starts one standalone redis-server with the settings of the
// nodes of the other topologies (no persistence, loopback only).
func StartNode(t testing.TB) *Server {
	t.Helper()
	binaries(t, "redis-server")
	return start(t, "standalone", redisproc.Config{})
}

// Server is one redis-server of a topology.
type Server = redisproc.Server

// addrs returns the addresses of servers.
func addrs(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr
	}
	return out
}
