package idemgrpc

import (
	"testing"
	"time"
)

func TestEstimate(t *testing.T) {
	d := newDurations()
	const m = "/svc/M"
	if got := d.estimate(m, 30*time.Second); got != time.Second {
		t.Fatalf("no history: %v, want the 1s floor", got)
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
	if got := d.estimate(m, 300*time.Millisecond); got != time.Second {
		t.Fatalf("lease ends in 300ms: %v, want the 1s floor", got)
	}
	if got := d.estimate("/svc/Other", 30*time.Second); got != time.Second {
		t.Fatalf("another method: %v", got)
	}
}
