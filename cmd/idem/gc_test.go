package main

import (
	"runtime"
	"testing"
	"time"
)

// The heap floor's percentage: gcPercent once the live heap is large
// enough that gcPercent grows it by heapHeadroom or more, and what grows
// it by heapHeadroom below that.
func TestFloorPercent(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, gcPercent},
		{1 << 20, 3225}, // capped: the runtime's minimum heap at 3225% is 1 MiB + 128 MiB
		{4 << 20, 3200}, // 128 MiB over 4 MiB
		{16 << 20, 800},
		{64 << 20, gcPercent},
		{256 << 20, gcPercent},
	} {
		if got := floorPercent(c.live); got != c.want {
			t.Errorf("floorPercent(%d MiB) = %d; want %d", c.live>>20, got, c.want)
		}
	}
}

// afterEachCycle's function runs after a collector's cycle, and again
// after the next: each call arms the next.
func TestAfterEachCycle(t *testing.T) {
	cycles := make(chan struct{}, 1)
	afterEachCycle(func() {
		select {
		case cycles <- struct{}{}:
		default: // the test has ended, or not yet read the last one
		}
	})
	for i := range 2 {
		runtime.GC()
		select {
		case <-cycles:
		case <-time.After(10 * time.Second): // a bound on a wait that a cycle ends, not a synchronisation
			t.Fatalf("cycle %d: the function did not run within 10 s", i+1)
		}
	}
}
