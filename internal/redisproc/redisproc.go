// Package redisproc starts and stops redis-server processes of our own on
// loopback, for the tests' topologies (internal/testinfra/redistopo) and the breach
// lab (internal/lab): free ports, a directory per server, kill, pause,
// resume and restart. It only ever signals processes it started.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idem/internal/childproc"
	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server may take to answer, and a
// topology to settle (cluster state ok, replicas in sync).
const startTimeout = 20 * time.Second

// Config says how Start runs one redis-server.
type Config struct {
	// Dir is the directory of the server's files: its log (redis.log),
	// nodes.conf of a cluster node, sentinel.conf of a Sentinel. It is
	// created when missing. Each server needs its own; empty is an error.
	Dir string
	// Port is the loopback port to listen on; 0 picks a free one (with
	// port+10000, the cluster bus, free as well).
	Port int
	// Env is added to the environment the server inherits from this
	// process (e.g. LD_PRELOAD=...); nil adds nothing.
	Env []string
	// Args are added after the base settings of every server (loopback
	// only, no persistence); nil adds nothing.
	Args []string
	// SentinelConf, when not empty, runs the server as a Sentinel with
	// this configuration, written to Dir/sentinel.conf. Empty: a data node.
	SentinelConf string
	// Password is the default user's password, for a server whose Args
	// set one (--requirepass): the wait for its answer authenticates
	// with it. Empty: none.
	Password string
}

// Server is one redis-server process started by Start. Its methods only
// ever signal that process; they are safe for concurrent use.
type Server struct {
	// Addr is the server's host:port on 127.0.0.1; Restart keeps it.
	Addr string
	// Port is the port of Addr.
	Port int
	// Dir holds the server's log and config files.
	Dir string

	program  string
	args     []string
	env      []string
	password string

	proc childproc.Proc // the latest process
}

// Start runs a redis-server as cfg says and waits until it answers (INFO,
// from its own process: not another server on the port).
// On any error no process of it is left running. The server runs until
// Kill, whatever happens to ctx, which bounds only the start.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("redisproc: Config.Dir is empty")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	program, lead, err := programOf(cfg)
	if err != nil {
		return nil, err
	}
	attempts := 1
	if cfg.Port == 0 {
		attempts = 3 // a port taken between freePort and bind is retried
	}
	var lastErr error
	for range attempts {
		port := cfg.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		args := slices.Concat(lead, []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--daemonize", "no", "--dir", cfg.Dir})
		if cfg.SentinelConf == "" {
			args = append(args, "--save", "", "--appendonly", "no")
		}
		s := &Server{
			Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, Dir: cfg.Dir,
			program: program, args: append(args, cfg.Args...), env: cfg.Env, password: cfg.Password,
		}
		if lastErr = s.launch(ctx); lastErr == nil {
			return s, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

// programOf returns the program that runs cfg and the arguments that come
// before the base settings. Sentinels run as redis-sentinel when that
// binary exists, else as `redis-server --sentinel` (the same program on
// Debian).
func programOf(cfg Config) (string, []string, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return "", nil, fmt.Errorf("redisproc: the redis-server program is needed (Debian: apt-get install redis-server): %w", err)
	}
	if cfg.SentinelConf == "" {
		return "redis-server", nil, nil
	}
	conf := filepath.Join(cfg.Dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(cfg.SentinelConf), 0o644); err != nil {
		return "", nil, err
	}
	if _, err := exec.LookPath("redis-sentinel"); err == nil {
		return "redis-sentinel", []string{conf}, nil
	}
	return "redis-server", []string{conf, "--sentinel"}, nil
}

// freePort returns a loopback port that is free, with port+10000 (the
// cluster bus) free as well. Another process may take it before the
// server binds it; Start retries then.
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
	return 0, errors.New("redisproc: no free loopback port pair found")
}

// Restart starts the server again after Kill or a crash: the same port,
// directory, environment and arguments, and (no persistence) no data. It
// waits until the server answers, as Start does.
func (s *Server) Restart(ctx context.Context) error { return s.launch(ctx) }

// launch starts a process of s, unless one is running, and waits until it
// answers; a process that does not is killed.
func (s *Server) launch(ctx context.Context) error {
	cmd := exec.Command(s.program, s.args...)
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	// Redis logs to stdout (no --logfile), which goes to the log.
	done, err := s.proc.Start(cmd, s.logPath())
	if err != nil {
		return fmt.Errorf("redisproc: start %s on %s: %w", s.program, s.Addr, err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password, MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	defer c.Close()
	err = childproc.Await(ctx, done, time.Now().Add(startTimeout), 20*time.Millisecond,
		func() error { return s.answers(ctx, c, cmd.Process.Pid) })
	switch {
	case errors.Is(err, childproc.ErrExited):
		return fmt.Errorf("redisproc: %s on port %d exited at start: %s", s.program, s.Port, oneLine(s.Log(5)))
	case err != nil:
		s.Kill()
		return fmt.Errorf("redisproc: %s on port %d did not answer: %w; log: %s", s.program, s.Port, err, oneLine(s.Log(5)))
	}
	return nil
}

// answers reports whether the server at c is the process pid: another
// server on the same port (taken since freePort, or since Kill before a
// Restart) answers as well, but with its own process_id.
func (s *Server) answers(ctx context.Context, c *redis.Client, pid int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	got, err := InfoField(ctx, c, "server", "process_id")
	if err != nil {
		return err
	}
	if got != strconv.Itoa(pid) {
		return fmt.Errorf("redisproc: %s is served by process %s, not by the one started (%d)", s.Addr, got, pid)
	}
	return nil
}

// Kill stops the process at once with SIGKILL, as a crash would, and waits
// for it to exit. Killing a server that has exited is harmless.
func (s *Server) Kill() {
	if s.proc.Signal(syscall.SIGCONT) != nil { // a paused process must be able to die
		return
	}
	_ = s.proc.Signal(syscall.SIGKILL)
	s.proc.Wait()
}

// Pause stops the process with SIGSTOP: it keeps its sockets but answers
// nothing, as a long GC pause or a stalled VM would. Resume undoes it.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	if err := s.proc.Signal(sig); err != nil {
		return fmt.Errorf("redisproc: server %s: %w", s.Addr, err)
	}
	return nil
}

// Alive reports whether the process is running.
func (s *Server) Alive() bool { return s.proc.Running() }

// Log returns the last n lines of the server's log, of every run of it,
// for failure messages.
func (s *Server) Log(n int) string { return strings.Join(childproc.Tail(s.logPath(), n), "\n") }

func (s *Server) logPath() string { return filepath.Join(s.Dir, "redis.log") }

// oneLine joins log lines for an error message.
func oneLine(log string) string { return strings.ReplaceAll(log, "\n", " | ") }

// InfoField returns one field of INFO section from the node at c.
func InfoField(ctx context.Context, c *redis.Client, section, field string) (string, error) {
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
