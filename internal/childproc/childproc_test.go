package childproc

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestStartKeepsOneProcessAndOneLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "out.log")
	var p Proc
	if p.Running() || p.Signal(syscall.SIGTERM) != ErrExited {
		t.Fatal("a zero Proc reports a process")
	}
	done, err := p.Start(exec.Command("sh", "-c", "echo first; exec sleep 60"), log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Start(exec.Command("true"), log); !errors.Is(err, ErrRunning) {
		t.Fatalf("a second Start while the first runs: %v; want ErrRunning", err)
	}
	ctx := context.Background()
	if err := Await(ctx, done, time.Now().Add(10*time.Second), 10*time.Millisecond, func() error {
		if len(Tail(log, 1)) == 1 && Tail(log, 1)[0] == "first" {
			return nil
		}
		return errors.New("no output yet")
	}); err != nil {
		t.Fatal(err)
	}
	if !p.Running() || p.Signal(syscall.SIGKILL) != nil {
		t.Fatal("the running process could not be signalled")
	}
	p.Wait()
	if p.Running() || !Exited(done) {
		t.Fatal("the process still runs after SIGKILL and Wait")
	}
	done, err = p.Start(exec.Command("sh", "-c", "echo second; exit 3"), log)
	if err != nil {
		t.Fatal(err)
	}
	err = Await(ctx, done, time.Now().Add(10*time.Second), 10*time.Millisecond, func() error { return errors.New("never ready") })
	if !errors.Is(err, ErrExited) {
		t.Fatalf("Await on a process that exits: %v; want ErrExited", err)
	}
	if got := Tail(log, 5); !slices.Equal(got, []string{"first", "second"}) {
		t.Fatalf("log = %q; want both runs' output", got)
	}
}

func TestAwaitReturnsReadysErrorAtTheDeadline(t *testing.T) {
	var p Proc
	done, err := p.Start(exec.Command("sleep", "60"), filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Signal(syscall.SIGKILL); p.Wait() }()
	notYet := errors.New("not yet")
	if err := Await(context.Background(), done, time.Now().Add(50*time.Millisecond), 10*time.Millisecond, func() error { return notYet }); err != notYet {
		t.Fatalf("Await = %v; want ready's error", err)
	}
}
