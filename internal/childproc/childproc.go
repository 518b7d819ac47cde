// Package childproc runs a server program as a child process under one
// handle that outlives each run of it: its output appended to one log
// file across restarts, its exit noticed, and signals sent only to the
// process it started. internal/redisproc (the lab's and the tests'
// redis-servers) and internal/testinfra/pgproc (the tests' PostgreSQL
// servers) are built on it.
package childproc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemkit/idem/internal/ctxtime"
)

var (
	// ErrRunning is returned by Start while the process it started last
	// is still running.
	ErrRunning = errors.New("childproc: the process is still running")
	// ErrExited is returned by Signal and SignalGroup when no process is
	// running, and by Await when the process exited before it was ready.
	ErrExited = errors.New("childproc: the process has exited")
)

// Proc is the latest process started through it. Its methods are safe for
// concurrent use; the zero Proc has started nothing.
type Proc struct {
	mu   sync.Mutex
	cmd  *exec.Cmd     // the latest process; nil before the first Start
	done chan struct{} // closed when cmd has exited and been reaped
}

// Start starts cmd, unless the process started last is still running
// (ErrRunning). Its stdout and stderr are appended to the file log
// (created when missing), so that the log keeps the output of every run,
// a failed start's included. It returns a channel closed when the
// process has exited and been reaped.
func (p *Proc) Start(cmd *exec.Cmd, log string) (<-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil && !Exited(p.done) {
		return nil, ErrRunning
	}
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Start()
	f.Close() // the process has its own descriptor
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return done, nil
}

// Running reports whether the process started last is running.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running()
}

func (p *Proc) running() bool { return p.cmd != nil && !Exited(p.done) }

// Signal sends sig to the running process, or ErrExited when none is
// running (none was started, or the last one has exited).
func (p *Proc) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running() {
		return ErrExited
	}
	return p.cmd.Process.Signal(sig)
}

// SignalGroup sends sig to the process group of the running process (one
// started with SysProcAttr.Setpgid), as Signal does to the process: a
// server's forked workers get it too.
func (p *Proc) SignalGroup(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running() {
		return ErrExited
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Wait returns when the process started last has exited, at once when
// none was started.
func (p *Proc) Wait() {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Exited reports whether done, a channel from Start, is closed.
func Exited(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Await calls ready every interval until it returns nil, for a process
// just started whose Start returned done. It returns ErrExited when the
// process exits first, and ready's last error when deadline passes or
// ctx ends first.
func Await(ctx context.Context, done <-chan struct{}, deadline time.Time, interval time.Duration, ready func() error) error {
	for {
		if Exited(done) {
			return ErrExited
		}
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		_ = ctxtime.Sleep(ctx, interval) // a done ctx ends the loop above
	}
}

// Tail returns the last n lines of the file at path (none when it cannot
// be read), for failure messages.
func Tail(path string, n int) []string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}
