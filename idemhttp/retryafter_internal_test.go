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

// TestRetryAfterSecondsSaturates: a Retry-After is rounded up to whole
// seconds and is at least 1; a duration near the largest one (an
// Options.UnknownRetryAfter meaning "not soon") stays the largest, not 1.
func TestRetryAfterSecondsSaturates(t *testing.T) {
	for d, want := range map[time.Duration]int{
		0:                                  1,
		time.Millisecond:                   1,
		1500 * time.Millisecond:            2,
		time.Duration(1<<63 - 1):           9223372037, // 9223372036.854775807s, rounded up
		time.Duration(1<<63-1) - time.Hour: 9223368437,
	} {
		if got := retryAfterSeconds(d); got != want {
			t.Errorf("retryAfterSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}
