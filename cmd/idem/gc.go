package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
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
	fromDefault = "idem serve's default"
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

// apply sets the collector's percentage when GOGC does not.
func (g gogc) apply() {
	if g.from == fromDefault {
		debug.SetGCPercent(g.percent)
	}
}
