package gateway

import (
	"runtime"
	"sync/atomic"
	"time"
)

// procsQuiet is how long the proxied requests must not overlap before the
// gateway goes back to one P. Long enough that a steady load of
// overlapping requests never sees a switch (each is a stop of the world),
// short enough that a lone caller after a burst is served on one P within
// a tenth of a second.
const procsQuiet = 100 * time.Millisecond

// procs runs the process on one P (GOMAXPROCS=1) while the proxied
// requests do not overlap, and on the runtime's default once two are in
// flight (Config.AdaptProcs).
//
// Why: a request wakes several goroutines in turn (the server's
// connection, the transport's read and write loops, the store client's).
// With a second P, each hand-off wakes a second thread, which spins,
// sleeps and is woken again; one request at a time gains nothing from it
// and pays for it in latency and CPU, on cores the upstream and the store
// may share. With one P the hand-offs stay on one thread. Measured in
// docs/benchmarks.md ("The levers of issue 35"): at 1 client the memory
// store went from 0.93-0.98x to 1.11-1.30x of a bare proxy, and where
// requests overlap the gateway runs on every P as before.
//
// Only requests count: a TLS handshake, the reconciler's sweep or the
// collector's marking while at most one request is in flight share the
// one P with it; a second request brings the others back.
//
// The switches are made by one goroutine (loop), never by a request: a
// change of GOMAXPROCS stops the world and first waits for a collection
// in progress to end, which a request must not wait for.
type procs struct {
	narrow, widen func() // runtime.GOMAXPROCS(1) and runtime.SetDefaultGOMAXPROCS; recorders in tests
	start         time.Time

	inflight    atomic.Int64
	narrowed    atomic.Bool  // set before the narrowing, so that a request that overlaps it asks for the widening
	lastOverlap atomic.Int64 // time.Since(start) when an overlap last may have ended (end saw two in flight), in ns

	wake chan struct{} // capacity 1: a request overlapped another while narrowed
	done chan struct{} // closed by stop
	over chan struct{} // closed when loop has returned
}

// newProcs returns the switch. Where the runtime's default is one P it
// switches between one and one; it is made anyway, because the default
// can grow (a container's CPU limit raised) and each widening reads it
// again.
func newProcs() *procs {
	return &procs{narrow: func() { runtime.GOMAXPROCS(1) }, widen: runtime.SetDefaultGOMAXPROCS}
}

// run starts the switching: one P once procsQuiet passes without two
// requests in flight. stop ends it and gives the runtime's default back.
func (p *procs) run() {
	p.start = time.Now()
	p.wake, p.done, p.over = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go p.loop()
}

func (p *procs) stop() {
	close(p.done)
	<-p.over
}

// begin counts a request in; end counts it out.
func (p *procs) begin() {
	if p.inflight.Add(1) > 1 && p.narrowed.Load() {
		select {
		case p.wake <- struct{}{}:
		default: // a widening is asked for already
		}
	}
}

func (p *procs) end() {
	if p.inflight.Load() > 1 { // an overlap may end with this request
		p.lastOverlap.Store(int64(time.Since(p.start)))
	}
	p.inflight.Add(-1)
}

// loop makes the switches: it widens when a request asks, and narrows
// when procsQuiet passed without two requests in flight. Narrowed, it
// waits for a request alone: no timer runs on an idle gateway.
func (p *procs) loop() {
	defer close(p.over)
	quiet := time.NewTimer(procsQuiet)
	defer quiet.Stop()
	for {
		select {
		case <-p.done:
			if p.narrowed.Load() {
				p.widen()
				p.narrowed.Store(false)
			}
			return
		case <-p.wake:
			if p.narrowed.Load() {
				p.widen()
				p.narrowed.Store(false)
				quiet.Reset(procsQuiet)
			}
		case <-quiet.C:
			if left := procsQuiet - (time.Since(p.start) - time.Duration(p.lastOverlap.Load())); left > 0 {
				quiet.Reset(left)
				continue
			}
			// narrowed before the count is read: a request that comes
			// in between either is seen here or sees narrowed and asks
			// for the widening, which this loop makes next.
			p.narrowed.Store(true)
			if p.inflight.Load() > 1 {
				p.narrowed.Store(false)
				quiet.Reset(procsQuiet)
				continue
			}
			p.narrow()
		}
	}
}
