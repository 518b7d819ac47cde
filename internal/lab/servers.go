package lab

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// shutdownTimeout bounds every cleanup step.
const shutdownTimeout = 5 * time.Second

// startRedis starts a redis-server of the lab in its own directory under
// the lab's temp dir, with env added to its environment. The caller kills it.
func (lb *lab) startRedis(ctx context.Context, env []string, args ...string) (*redisproc.Server, error) {
	dir, err := os.MkdirTemp(lb.tmp, "redis-")
	if err != nil {
		return nil, err
	}
	srv, err := redisproc.Start(ctx, redisproc.Config{Dir: dir, Env: env, Args: args})
	if err != nil {
		return nil, fmt.Errorf("lab: this scenario starts its own Redis: %w", err)
	}
	return srv, nil
}

// clockShim is a tiny LD_PRELOAD library that adds the nanoseconds written
// in a file to CLOCK_REALTIME (clock_gettime, gettimeofday, time) of one
// process: a wall-clock jump on the Redis host. Debian's libfaketime cannot
// be used here: it deadlocks against the jemalloc that Debian's redis-server
// links (libfaketime issues #130, #327, #478). The shim calls the kernel
// directly and never allocates, so it has no such recursion.
const clockShimC = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
static long long offset_ns(void) {
  const char *p = getenv("LAB_CLOCK_OFFSET_FILE");
  if (!p) return 0;
  int fd = syscall(SYS_openat, AT_FDCWD, p, O_RDONLY);
  if (fd < 0) return 0;
  char b[32];
  long n = syscall(SYS_read, fd, b, sizeof b - 1);
  syscall(SYS_close, fd);
  if (n <= 0) return 0;
  b[n] = 0;
  return strtoll(b, 0, 10);
}
int clock_gettime(clockid_t id, struct timespec *ts) {
  long r = syscall(SYS_clock_gettime, id, ts);
  if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    long long t = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
    ts->tv_sec = t / 1000000000LL;
    ts->tv_nsec = t % 1000000000LL;
  }
  return (int)r;
}
int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts;
  int r = clock_gettime(CLOCK_REALTIME, &ts);
  if (r == 0 && tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
  return r;
}
time_t time(time_t *t) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (t) *t = ts.tv_sec;
  return ts.tv_sec;
}
`

var shimOnce struct {
	sync.Mutex
	path string
}

// buildClockShim compiles the shim once per process with the C compiler.
func buildClockShim(ctx context.Context) (string, error) {
	shimOnce.Lock()
	defer shimOnce.Unlock()
	if shimOnce.path != "" {
		return shimOnce.path, nil
	}
	sum := sha256.Sum256([]byte(clockShimC))
	dir := filepath.Join(os.TempDir(), "idem-lab-clockshim-"+hex.EncodeToString(sum[:6]))
	so := filepath.Join(dir, "clockshim.so")
	if _, err := os.Stat(so); err == nil {
		shimOnce.path = so
		return so, nil
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", fmt.Errorf("lab: the clock scenario compiles a small LD_PRELOAD clock shim and needs a C compiler (Debian: apt-get install gcc): %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	src := filepath.Join(dir, "clockshim.c")
	if err := os.WriteFile(src, []byte(clockShimC), 0o600); err != nil {
		return "", err
	}
	tmp := so + ".tmp" + strconv.Itoa(os.Getpid())
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, cc, "-shared", "-fPIC", "-O2", "-o", tmp, src)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("lab: compile the clock shim: %w: %s", err, out.String())
	}
	if err := os.Rename(tmp, so); err != nil {
		return "", err
	}
	shimOnce.path = so
	return so, nil
}

// jumpClock sets the wall-clock offset of the shimmed server. It writes a
// new file and renames it over the old one: the shim reads the file at
// every clock call, and would read a file truncated in place as empty, an
// offset of 0 (a jump back to the true time for that call).
func jumpClock(file string, by time.Duration) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(int64(by), 10)), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// endpoint is the Redis address the workers dial; a failover moves it.
type endpoint struct {
	mu   sync.Mutex
	addr string
}

// newEndpoint returns an endpoint at addr.
func newEndpoint(addr string) *endpoint { return &endpoint{addr: addr} }

func (e *endpoint) set(a string) { e.mu.Lock(); e.addr = a; e.mu.Unlock() }
func (e *endpoint) get() string  { e.mu.Lock(); defer e.mu.Unlock(); return e.addr }

// waitReplicated waits until the replica reports its link to the primary up.
func waitReplicated(ctx context.Context, replica string) error {
	c := redis.NewClient(&redis.Options{Addr: replica, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("lab: the replica did not sync with the primary in 10s")
}
