package gateway

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// procsRecorder is a procs whose switches are counted, not made.
func procsRecorder() (p *procs, narrowed, widened *atomic.Int32) {
	narrowed, widened = new(atomic.Int32), new(atomic.Int32)
	return &procs{narrow: func() { narrowed.Add(1) }, widen: func() { widened.Add(1) }}, narrowed, widened
}

// One P once procsQuiet passes without two requests in flight; every P as
// soon as a second request comes; one P again procsQuiet after the last
// overlap, not while two are still in flight; requests one at a time do
// not switch; stop gives the default back and ends the switching.
func TestProcs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, narrowed, widened := procsRecorder()
		p.run()
		want := func(step string, n, w int32, isNarrow bool) {
			t.Helper()
			synctest.Wait()
			if narrowed.Load() != n || widened.Load() != w || p.narrowed.Load() != isNarrow {
				t.Errorf("%s: narrowed %d times, widened %d, now narrow %v; want %d, %d, %v", step, narrowed.Load(), widened.Load(), p.narrowed.Load(), n, w, isNarrow)
			}
		}
		time.Sleep(procsQuiet - time.Millisecond)
		want("before procsQuiet", 0, 0, false)
		time.Sleep(time.Millisecond)
		want("after procsQuiet", 1, 0, true)

		for range 5 { // one at a time, spaced or not
			p.begin()
			time.Sleep(procsQuiet)
			p.end()
			p.begin()
			p.end()
		}
		want("requests one at a time", 1, 0, true)

		p.begin()
		p.begin()
		want("a second request in flight", 1, 1, false)
		time.Sleep(10 * procsQuiet)
		want("two in flight for a while", 1, 1, false)
		p.end() // the overlap ends
		time.Sleep(procsQuiet - time.Millisecond)
		want("less than procsQuiet after the overlap ended", 1, 1, false)
		time.Sleep(time.Millisecond)
		want("procsQuiet after the overlap ended, one still in flight", 2, 1, true)
		p.begin()
		want("a second request again", 2, 2, false)
		p.end()
		p.end()
		time.Sleep(procsQuiet)
		want("procsQuiet after the last request ended", 3, 2, true)

		p.stop()
		want("stopped while narrow", 3, 3, false)
		p.begin()
		p.begin()
		p.end()
		p.end()
		time.Sleep(10 * procsQuiet)
		want("after stop", 3, 3, false)
	})
}
