package idemhttp

import (
	"strconv"
	"testing"
	"time"
)

// The estimate is the 90th percentile of the last routeSamples durations
// of a route, and the routes kept stay bounded whatever the paths.
func TestRouteTimes(t *testing.T) {
	rt := newRouteTimes()
	pay := route{"POST", "/pay"}
	if _, ok := rt.p90(pay); ok {
		t.Fatal("an estimate without executions")
	}
	for i := 1; i <= 10; i++ {
		rt.add(pay, time.Duration(i)*time.Second)
	}
	if d, _ := rt.p90(pay); d != 9*time.Second {
		t.Errorf("p90 of 1s..10s = %v, want 9s", d)
	}
	for range routeSamples {
		rt.add(pay, time.Second)
	}
	if d, _ := rt.p90(pay); d != time.Second {
		t.Errorf("p90 after %d executions of 1s = %v, want 1s: old samples must leave the ring", routeSamples, d)
	}
	for i := range 3 * maxRoutes {
		rt.add(route{"POST", "/charges/ch_" + strconv.Itoa(i)}, time.Second)
	}
	if n := len(rt.routes); n > maxRoutes {
		t.Errorf("%d routes kept, bound %d", n, maxRoutes)
	}
}
