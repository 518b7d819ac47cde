package idem

import (
	"sync/atomic"
	"time"
)

// workTimes measures how long the work of Do takes on this engine, so that
// a Do that meets a key in flight is told to come back when such work is
// usually done: a 5 ms job is asked about again in milliseconds, not at
// the end of a 30 s lease.
type workTimes struct {
	typical atomic.Int64 // nanoseconds: a moving mean of recent works (weight 1/8); zero before the first
}

func (w *workTimes) add(d time.Duration) {
	for {
		old := w.typical.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/8
		}
		if w.typical.CompareAndSwap(old, max(next, 1)) {
			return
		}
	}
}

// retryAfter is when a Do that met rec, held by another attempt whose lease
// ends in leaseRest, should ask again: when a typical work begun at
// rec.AcquiredAt would be done; for a work that has run longer than that,
// after a quarter of a typical work or of its age, whichever is longer (a
// slow work is not polled in a tight loop); never after leaseRest. Before
// any work was measured, it is leaseRest.
func (w *workTimes) retryAfter(rec Record, leaseRest time.Duration) time.Duration {
	typical := time.Duration(w.typical.Load())
	if typical <= 0 {
		return leaseRest
	}
	age := max(time.Since(rec.AcquiredAt), 0) // the store's clock may run ahead of ours
	wait := max(typical-age, typical/4, age/4, time.Millisecond)
	return min(wait, leaseRest)
}
