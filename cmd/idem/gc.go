package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
)

// gcPercent is the collector's GOGC in idem serve when the environment
// gives none. The tail of a request's latency waits on the collector's
// cycles, and the memory store keeps every request's record in the heap
// for the retention: on the memory store at 32 clients, p99 added over a
// bare proxy measured +0.9 to +2.0 ms at Go's 100 and +0.3 to +0.8 ms at
// 200, for a peak RSS 1.4 times larger (docs/benchmarks.md). GOGC, Go's
// own variable, sets another: 100 is Go's default.
const gcPercent = 200

// gogc is the collector's percentage as idem serve runs it, and where it
// comes from.
type gogc struct {
	percent int    // -1: off
	from    string // fromEnv or fromDefault, as the first log line says it
}

// Where a gogc comes from: the runtime has read GOGC itself when it is set.
const (
	fromEnv     = "GOGC"
	fromDefault = "idem serve's default: more while the live heap is under 64 MiB, for 128 MiB of growth between cycles"
)

// serveGOGC reads GOGC as the runtime does: unset or empty, idem serve's
// gcPercent; else a percentage or off. A value that is not a number the
// runtime reads as 100 without a word, and a negative one as off: both are
// refused, so that off has one spelling.
func serveGOGC() (gogc, error) {
	switch v := os.Getenv("GOGC"); v {
	case "":
		return gogc{gcPercent, fromDefault}, nil
	case "off":
		return gogc{-1, fromEnv}, nil
	default:
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return gogc{}, fmt.Errorf("%w: GOGC=%q: want a percentage (0 or more) or off", errUsage, v)
		}
		return gogc{n, fromEnv}, nil
	}
}

// heapHeadroom is how much the heap may grow between two of the
// collector's cycles, at least, in idem serve when GOGC is not set: a
// heap floor. A gateway's live heap is small (10 MB on Redis, and on the
// memory store until it fills) and each request allocates about 14 KB, so
// at gcPercent alone it collected four to seven times a second at 32
// clients, and each cycle's stop of the world and marking held the
// requests in flight: the memory store's p99 added over a bare proxy at
// 32 clients was +0.3 to +1.6 ms without the floor, against -0.6 to +0.8
// ms with it, lower in six of eight paired runs (docs/benchmarks.md). A
// heap of live+128 MiB peaks no higher than gcPercent's three times the
// live heap once the live heap passes 64 MiB, and at the memory store's
// default bound (--memory-limit 256 MiB) both give the same 768 MiB;
// GOMEMLIMIT, when set, bounds it as it bounds any Go program.
const heapHeadroom = 128 << 20

// apply sets the collector's percentage when GOGC does not: gcPercent, or
// more while the live heap is under heapHeadroom/gcPercent*100, so that a
// cycle comes after heapHeadroom of allocation at the soonest. It is set
// again after each cycle, from the live heap that cycle found.
func (g gogc) apply() {
	if g.from == fromDefault {
		debug.SetGCPercent(g.percent)
		heapFloorOnce.Do(func() { afterEachCycle(func() { debug.SetGCPercent(floorPercent(liveHeap())) }) })
	}
}

var heapFloorOnce sync.Once

// floorPercent is the collector's percentage for a live heap of live
// bytes: gcPercent, or the percentage that lets the heap grow by
// heapHeadroom. The runtime also keeps the goal at least its minimum heap
// (4 MiB at 100, in proportion to the percentage: runtime/mgcpacer.go),
// which for a live heap of a few MiB would be several times live +
// heapHeadroom: the percentage is capped where that minimum is live +
// heapHeadroom.
func floorPercent(live uint64) int {
	if live == 0 {
		return gcPercent
	}
	return int(max(gcPercent, min(heapHeadroom*100/live, (live+heapHeadroom)*100/runtimeMinHeap)))
}

// runtimeMinHeap is the runtime's minimum heap goal at GOGC=100.
const runtimeMinHeap = 4 << 20

// liveHeap is the heap the last cycle found reachable.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// afterEachCycle calls f after each of the collector's cycles, on a
// goroutine of the runtime's that runs cleanups: the cleanup of an object
// nothing refers to runs after the cycle that found it unreachable, and
// arms the next one first, so that the next object exists before f runs
// (an object made while a cycle marks survives that cycle). No goroutine
// of its own, and nothing to stop.
func afterEachCycle(f func()) {
	runtime.AddCleanup(new(cycleMark), func(struct{}) {
		afterEachCycle(f)
		f()
	}, struct{}{})
}

// cycleMark is the object whose cleanup marks a cycle. Its pointer keeps
// it out of the tiny allocator, whose objects may share a block with
// others that stay reachable, and so never be found unreachable.
type cycleMark struct{ _ *byte }
