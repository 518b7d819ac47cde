package gateway

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// procsQuiet is how long the proxied requests must not overlap before the
// gateway goes back to one P. Long enough that a steady load of
// overlapping requests never sees a switch (each is a stop of the world
// of some microseconds), short enough that a lone caller after a burst
// is served on one P within a tenth of a second.
const procsQuiet = 100 * time.Millisecond

// procs runs the process on one P (GOMAXPROCS=1) while the proxied
// requests do not overlap, and on the runtime's default as soon as two
// are in flight (Config.AdaptProcs).
//
// Why: a request wakes several goroutines in turn (the server's
// connection, the transport's read and write loops, the store client's).
// With a second P, each hand-off wakes a second thread, which spins,
// sleeps and is woken again; one request at a time gains nothing from it
// and pays for it in latency and CPU, on cores the upstream and the store
// may share. With one P the hand-offs stay on one thread. Measured in
// docs/benchmarks.md ("The levers of issue 35"): at 1 client the memory
// store went from 0.89x to 1.05x of a bare proxy, and overlapping
// requests run on every P as before.
//
// Only requests count: a TLS handshake, the reconciler's sweep or the
// collector's marking while at most one request is in flight share the
// one P with it; a second request brings the others back.
type procs struct {
	narrow, widen func() // runtime.GOMAXPROCS(1) and runtime.SetDefaultGOMAXPROCS; recorders in tests
	start         time.Time

	inflight    atomic.Int64
	narrowed    atomic.Bool
	lastOverlap atomic.Int64 // time.Since(start) when two requests were last in flight (one began or ended), in ns

	mu      sync.Mutex // the switches, timer and stopped
	timer   *time.Timer
	stopped bool
}

// newProcs returns the switch on the runtime's GOMAXPROCS, or nil when
// the runtime runs on one P anyway.
func newProcs() *procs {
	if runtime.GOMAXPROCS(0) < 2 {
		return nil
	}
	return &procs{narrow: func() { runtime.GOMAXPROCS(1) }, widen: runtime.SetDefaultGOMAXPROCS}
}

// run starts the switch: one P once procsQuiet passes without two
// requests in flight. stop ends it.
func (p *procs) run() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start = time.Now()
	p.timer = time.AfterFunc(procsQuiet, p.check)
}

// stop ends the switch and gives the process the runtime's default back.
func (p *procs) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.timer.Stop()
	if p.narrowed.Load() {
		p.widen()
		p.narrowed.Store(false)
	}
}

// begin counts a request in; end counts it out.
func (p *procs) begin() {
	if p.inflight.Add(1) < 2 {
		return
	}
	p.lastOverlap.Store(int64(time.Since(p.start)))
	if !p.narrowed.Load() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.narrowed.Load() && !p.stopped {
		p.widen()
		p.narrowed.Store(false)
		p.timer.Reset(procsQuiet)
	}
}

func (p *procs) end() {
	if p.inflight.Add(-1) > 0 { // an overlap ends
		p.lastOverlap.Store(int64(time.Since(p.start)))
	}
}

// check runs on the timer: one P when no two requests were in flight for
// procsQuiet, else a check again when that could be so.
func (p *procs) check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.narrowed.Load() {
		return
	}
	wait := procsQuiet
	if p.inflight.Load() < 2 {
		wait -= time.Since(p.start) - time.Duration(p.lastOverlap.Load())
	}
	if wait > 0 {
		p.timer.Reset(wait)
		return
	}
	p.narrow()
	p.narrowed.Store(true)
}
