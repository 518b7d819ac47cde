// Package redistopo starts throwaway Redis topologies for tests: a Redis
// Cluster, and a primary with replicas watched by Sentinels. Every server
// is a redis-server process that this package starts on a free loopback
// port, in a temporary directory of the test, and stops (SIGKILL) in
// t.Cleanup. It never signals a process it did not start.
//
// When the redis-server or redis-cli binary is missing, the test is
// skipped, or failed under CI=true (see testenv.Unavailable). Sentinels
// run as `redis-sentinel` when that binary exists, else as
// `redis-server --sentinel` (the same program on Debian).
package redistopo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server may take to answer PING, and a
// topology to settle (cluster state ok, replicas in sync).
const startTimeout = 20 * time.Second

// Node is one server process started by this package.
type Node struct {
	// Addr is the node's host:port on 127.0.0.1.
	Addr string
	// Port is the port of Addr.
	Port int
	// Dir holds the node's config and log files.
	Dir string

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and been reaped
}

// Kill stops the process at once with SIGKILL, as a crash would, and waits
// for it to exit. Killing a node twice is harmless.
func (n *Node) Kill() {
	select {
	case <-n.done:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGCONT) // a paused process must be able to die
	_ = n.cmd.Process.Kill()
	<-n.done
}

// Pause stops the process with SIGSTOP: it keeps its sockets but answers
// nothing, as a long GC pause or a stalled VM would. Resume undoes it.
func (n *Node) Pause() error { return n.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (n *Node) Resume() error { return n.signal(syscall.SIGCONT) }

func (n *Node) signal(sig syscall.Signal) error {
	select {
	case <-n.done:
		return fmt.Errorf("redistopo: node %s has exited", n.Addr)
	default:
	}
	return n.cmd.Process.Signal(sig)
}

// Alive reports whether the process is still running.
func (n *Node) Alive() bool {
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Client returns a plain client of this one node, closed when t ends.
func (n *Node) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// Log returns the tail of the node's log file, for failure messages.
func (n *Node) Log() string {
	b, _ := os.ReadFile(filepath.Join(n.Dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
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

// freePort returns a loopback port that is free, with port+10000 (the
// cluster bus) free as well. Another process may take it before the
// server binds it; start retries then.
func freePort() (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, errors.New("redistopo: no free loopback port pair found")
}

// start runs a redis-server with the base settings of every node (loopback
// only, no persistence, a log file) plus extra, and waits until it answers
// PING. sentinel runs it in Sentinel mode with the config file conf.
func start(t testing.TB, name string, sentinel bool, conf string, extra ...string) *Node {
	t.Helper()
	var lastErr error
	for range 3 { // a port taken between freePort and bind is retried
		n, err := startOnce(t, name, sentinel, conf, extra)
		if err == nil {
			return n
		}
		lastErr = err
	}
	t.Fatalf("redistopo: start %s: %v", name, lastErr)
	return nil
}

func startOnce(t testing.TB, name string, sentinel bool, conf string, extra []string) (*Node, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var args []string
	program := "redis-server"
	if sentinel {
		if err := os.WriteFile(filepath.Join(dir, "sentinel.conf"), []byte(conf), 0o644); err != nil {
			return nil, err
		}
		args = append(args, filepath.Join(dir, "sentinel.conf"))
		if _, err := exec.LookPath("redis-sentinel"); err == nil {
			program = "redis-sentinel"
		} else {
			args = append(args, "--sentinel")
		}
	}
	args = append(args, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--daemonize", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if !sentinel {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	args = append(args, extra...)
	cmd := exec.Command(program, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	n := &Node{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, Dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(n.Kill)
	c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return n, nil
		}
		if !n.Alive() || time.Now().After(deadline) {
			n.Kill()
			return nil, fmt.Errorf("%s on port %d did not come up: %v; stderr %q; log:\n%s", program, port, err, stderr.String(), n.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

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

// infoField returns one field of INFO section from the node at c.
func infoField(ctx context.Context, c *redis.Client, section, field string) (string, error) {
	info, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no %s in INFO %s", field, section)
}

// StartNode starts one standalone redis-server with the settings of the
// nodes of the other topologies (no persistence, loopback only).
func StartNode(t testing.TB) *Node {
	t.Helper()
	binaries(t, "redis-server")
	return start(t, "standalone", false, "")
}
