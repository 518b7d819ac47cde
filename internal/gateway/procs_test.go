package gateway

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// procsRecorder is a procs whose switches are counted, not made; during
// its narrowing it runs during (nil: nothing).
func procsRecorder(during func(*procs)) (p *procs, narrowed, widened *atomic.Int32) {
	narrowed, widened = new(atomic.Int32), new(atomic.Int32)
	p = &procs{widen: func() { widened.Add(1) }}
	p.narrow = func() {
		narrowed.Add(1)
		if during != nil {
			during(p)
		}
	}
	return p, narrowed, widened
}

// wantProcs waits until p's loop is idle, then checks its switches so far.
func wantProcs(t *testing.T, p *procs, narrowed, widened *atomic.Int32, step string, n, w int32, isNarrow bool) {
	t.Helper()
	synctest.Wait()
	if narrowed.Load() != n || widened.Load() != w || p.narrowed.Load() != isNarrow {
		t.Errorf("%s: narrowed %d times, widened %d, now narrow %v; want %d, %d, %v", step, narrowed.Load(), widened.Load(), p.narrowed.Load(), n, w, isNarrow)
	}
}

// One P once procsQuiet passes without two requests in flight; every P as
// soon as a second request comes; one P again procsQuiet after the
// overlap ended, not while two are still in flight; requests one at a
// time do not switch; stop gives the default back.
func TestProcs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, narrowed, widened := procsRecorder(nil)
		want := func(step string, n, w int32, isNarrow bool) {
			t.Helper()
			wantProcs(t, p, narrowed, widened, step, n, w, isNarrow)
		}
		p.run()
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
	})
}

// Two requests that come while the process narrows (GOMAXPROCS stops the
// world, after a collection in progress) are not left on one P.
func TestProcsOverlapDuringNarrowing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, narrowed, widened := procsRecorder(func(p *procs) {
			if !p.narrowed.Load() {
				t.Error("narrowing before narrowed is set: a request that comes now would not ask to widen")
			}
			p.begin()
			p.begin()
		})
		p.run()
		time.Sleep(procsQuiet)
		wantProcs(t, p, narrowed, widened, "two requests came during the narrowing", 1, 1, false)
		p.end()
		p.end()
		p.stop()
	})
}
