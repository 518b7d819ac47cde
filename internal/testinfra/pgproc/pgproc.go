// Package pgproc starts and stops PostgreSQL servers of the caller's own,
// for fault tests: initdb in a directory of its own, postgres on a free
// loopback port, and pause (SIGSTOP), crash (SIGKILL) and restart of the
// server's whole process group. It only ever signals processes it started.
//
// The programs come from /usr/lib/postgresql/*/bin (Debian's layout, the
// newest version) or PATH. Run as root, the server runs as the postgres
// user, which initdb requires.
package pgproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/childproc"
)

// Server is one PostgreSQL server started by Start.
type Server struct {
	// Port is the loopback port it listens on; Restart keeps it.
	Port int
	// Dir holds the data directory (data/) and the log (postgres.log).
	Dir string

	bin  string
	cred *syscall.Credential // the postgres user, when run as root; nil otherwise

	proc childproc.Proc // the latest postmaster
}

// URL returns the server's connection string for user postgres, database
// postgres, through addr (host:port; empty: the server itself).
func (s *Server) URL(addr string) string {
	if addr == "" {
		addr = "127.0.0.1:" + strconv.Itoa(s.Port)
	}
	return "postgres://postgres@" + addr + "/postgres?sslmode=disable"
}

// Start runs initdb in dir (which the postgres user must be able to
// reach: under os.TempDir, not testing's TempDir, whose parents are
// private to root) and starts the server on a free port, waiting
// until it accepts connections. The server runs until Kill or Stop.
func Start(ctx context.Context, dir string) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgproc: run as root, the server needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, err
		}
	}
	initdb := s.command(filepath.Join(bin, "initdb"), "-D", s.data(), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgproc: initdb: %w: %s", err, out)
	}
	if s.Port, err = freePort(); err != nil {
		return nil, err
	}
	return s, s.Restart(ctx)
}

// binDir finds the directory of initdb and postgres.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	p, err := exec.LookPath("initdb")
	if err != nil {
		return "", errors.New("pgproc: initdb not found in /usr/lib/postgresql/*/bin or PATH (Debian: apt-get install postgresql)")
	}
	return filepath.Dir(p), nil
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) data() string { return filepath.Join(s.Dir, "data") }

// command runs name as the server's user, in a process group of its own
// (so that a signal reaches the postmaster and every backend).
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	cmd.Dir = s.Dir
	return cmd
}

// Restart starts the server again after Kill (crash recovery replays the
// WAL: a committed transaction survives) and waits until it accepts
// connections. fsync is off: a crash of the process loses nothing the
// kernel has, and these servers never outlive a crash of the machine.
func (s *Server) Restart(ctx context.Context) error {
	// The backends of a killed server may still be exiting, attached to
	// its shared memory, when the postmaster is gone: the new postmaster
	// then refuses to start. It is started again until they are gone.
	deadline := time.Now().Add(time.Minute)
	for {
		err := s.start(ctx, deadline)
		if err == nil || !strings.Contains(err.Error(), "pre-existing shared memory block") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// start starts postgres once and waits until it accepts connections, or
// it exits, or deadline passes.
func (s *Server) start(ctx context.Context, deadline time.Time) error {
	cmd := s.command(filepath.Join(s.bin, "postgres"), "-D", s.data(), "-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+s.Dir, "-c", "fsync=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB")
	done, err := s.proc.Start(cmd, s.logPath())
	if err != nil {
		return fmt.Errorf("pgproc: start postgres: %w", err)
	}
	err = childproc.Await(ctx, done, deadline, 50*time.Millisecond, func() error {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, s.URL(""))
		if err == nil {
			conn.Close(context.Background())
		}
		return err
	})
	switch {
	case errors.Is(err, childproc.ErrExited):
		return fmt.Errorf("pgproc: postgres exited at start: %s", s.Log(5))
	case err != nil:
		s.Kill()
		return fmt.Errorf("pgproc: postgres on port %d did not accept connections: %w; log: %s", s.Port, err, s.Log(5))
	}
	return nil
}

// signal sends sig to the server's process group.
func (s *Server) signal(sig syscall.Signal) error {
	if err := s.proc.SignalGroup(sig); err != nil {
		return fmt.Errorf("pgproc: the server: %w", err)
	}
	return nil
}

// Pause stops every process of the server with SIGSTOP.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues them with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// Kill SIGKILLs every process of the server, as a crash would, and waits
// for the postmaster to exit. Killing a server that has exited is harmless.
func (s *Server) Kill() {
	if s.signal(syscall.SIGCONT) != nil {
		return
	}
	_ = s.signal(syscall.SIGKILL)
	s.proc.Wait()
	// The backends are gone with their group; wait until the port is free.
	for range 100 {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.Port), 50*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
}

// Log returns the last n lines of the server's log.
func (s *Server) Log(n int) string { return strings.Join(childproc.Tail(s.logPath(), n), " | ") }

func (s *Server) logPath() string { return filepath.Join(s.Dir, "postgres.log") }
