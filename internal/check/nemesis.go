package check

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/faultproxy"
)

// Process is a server process of the harness's own that a nemesis can
// pause and crash: redisproc.Server, pgproc.Server.
type Process interface {
	Pause() error
	Resume() error
	Kill()
	Restart(ctx context.Context) error
}

// Pause stops the process with SIGSTOP for the fault's length, then
// SIGCONT: a GC pause, a stalled VM.
type Pause struct {
	What string
	P    Process
}

// Name implements Nemesis.
func (n Pause) Name() string { return "pause " + n.What }

// Inject implements Nemesis.
func (n Pause) Inject(context.Context, *rand.Rand) (func() error, error) {
	if err := n.P.Pause(); err != nil {
		return nil, err
	}
	return n.P.Resume, nil
}

// Crash SIGKILLs the process and restarts it when the fault ends.
type Crash struct {
	What string
	P    Process
}

// Name implements Nemesis.
func (n Crash) Name() string { return "crash " + n.What }

// Inject implements Nemesis.
func (n Crash) Inject(context.Context, *rand.Rand) (func() error, error) {
	n.P.Kill()
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return n.P.Restart(ctx)
	}, nil
}

// Net sets the fault proxy between clients and a server to a mode for
// the fault's length: replies dropped (the command ran, the client never
// hears), delayed, or a partition that cuts and refuses connections.
type Net struct {
	What  string
	Proxy *faultproxy.Proxy
	Mode  faultproxy.Mode
	Delay time.Duration // Mode Delay
}

// Name implements Nemesis.
func (n Net) Name() string { return n.Mode.String() + " " + n.What }

// Inject implements Nemesis.
func (n Net) Inject(context.Context, *rand.Rand) (func() error, error) {
	if n.Mode == faultproxy.Delay {
		n.Proxy.SetDelay(n.Delay)
	}
	n.Proxy.SetMode(n.Mode)
	return func() error {
		n.Proxy.SetMode(faultproxy.Forward)
		return nil
	}, nil
}

// JumpClock is a clock that a ClockJump moves: what a store reads when
// it keeps time itself (memstore.Options.Clock).
type JumpClock struct{ offset atomic.Int64 }

// Now returns the wall clock moved by every jump so far.
func (c *JumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// ClockJump moves a JumpClock forward or back by up to Max at once.
type ClockJump struct {
	Clock *JumpClock
	Max   time.Duration
}

// Name implements Nemesis.
func (n ClockJump) Name() string { return "clock jump" }

func (ClockJump) movesClock() {}

// Inject implements Nemesis: the jump stays; healing does nothing.
func (n ClockJump) Inject(_ context.Context, rng *rand.Rand) (func() error, error) {
	d := rng.Int64N(int64(2*n.Max)) - int64(n.Max)
	n.Clock.offset.Add(d)
	return func() error { return nil }, nil
}
