package idemgrpc

import (
	"testing"
	"time"
)

func TestEstimate(t *testing.T) {
	d := newDurations()
	const m = "/svc/M"
	if got := d.estimate(m, 30*time.Second); got != noHistoryDelay {
		t.Fatalf("no history: %v, want %v", got, noHistoryDelay)
	}
	d.add(m, 4*time.Second)
	if got := d.estimate(m, 30*time.Second); got != 4*time.Second {
		t.Fatalf("one call of 4s: %v", got)
	}
	d.add(m, 12*time.Second) // the average moves an eighth of the way
	if got := d.estimate(m, 30*time.Second); got != 5*time.Second {
		t.Fatalf("after 4s and 12s: %v, want 5s", got)
	}
	if got := d.estimate(m, 2*time.Second); got != 2*time.Second {
		t.Fatalf("lease ends in 2s: %v, want 2s", got)
	}
	if got := d.estimate("/svc/Other", 30*time.Second); got != noHistoryDelay {
		t.Fatalf("another method: %v", got)
	}
	fast := "/svc/Fast"
	d.add(fast, 50*time.Millisecond)
	if got := d.estimate(fast, 30*time.Second); got != 50*time.Millisecond {
		t.Fatalf("a 50ms method: %v, want 50ms (no floor of a second)", got)
	}
	d.add("/svc/Instant", 20*time.Microsecond)
	if got := d.estimate("/svc/Instant", 30*time.Second); got != time.Millisecond {
		t.Fatalf("a 20µs method: %v, want the 1ms resolution of the pushback", got)
	}
	if got := d.estimate(fast, 0); got != time.Millisecond {
		t.Fatalf("lease already over: %v, want 1ms", got)
	}
}
