package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
)

// gomaxprocs is how idem serve sets the runtime's GOMAXPROCS, and where
// that comes from, as the first log line says it.
type gomaxprocs struct {
	adapt bool // gateway.Config.AdaptProcs: one P while requests do not overlap
	from  string
}

// serveGOMAXPROCS reads GOMAXPROCS as the runtime does. Unset or empty,
// idem serve runs on one P while the proxied requests do not overlap and
// on the runtime's default once they do (gateway.Config.AdaptProcs), where
// that default is more than one. Set, the runtime has read it: a value
// the runtime ignores without a word (not a number, or below 1) is
// refused.
func serveGOMAXPROCS() (gomaxprocs, error) {
	v := os.Getenv("GOMAXPROCS")
	if v != "" {
		if n, err := strconv.ParseInt(v, 10, 32); err != nil || n < 1 {
			return gomaxprocs{}, fmt.Errorf("%w: GOMAXPROCS=%q: want a number of Ps, 1 or more", errUsage, v)
		}
		return gomaxprocs{from: "GOMAXPROCS"}, nil
	}
	if runtime.GOMAXPROCS(0) < 2 {
		return gomaxprocs{from: "Go's default"}, nil
	}
	return gomaxprocs{adapt: true, from: "idem serve's default: 1 while requests do not overlap"}, nil
}
