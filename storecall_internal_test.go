package idem

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"
)

// callContext behaves as context.WithDeadline does, though its timer is
// made only when Done is asked for. In a bubble the deadlines are exact.
func TestCallContext(t *testing.T) {
	e := &Engine{storeTimeout: time.Second}
	t.Run("Err sees the deadline without Done", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := e.callCtx(context.Background())
			defer c.end()
			if d, ok := c.Deadline(); !ok || time.Until(d) != time.Second || c.Err() != nil {
				t.Fatalf("Deadline %v %v, Err %v; want in 1s, nil", d, ok, c.Err())
			}
			time.Sleep(time.Second)
			if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) || !c.timedOut() {
				t.Fatalf("Err at the deadline = %v, timedOut %v; want DeadlineExceeded", err, c.timedOut())
			}
		})
	})
	t.Run("Done and AfterFunc at the deadline, without a goroutine", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := e.callCtx(context.Background())
			defer c.end()
			start := time.Now()
			fired := make(chan time.Time, 1)
			before := runtime.NumGoroutine()
			stop := context.AfterFunc(c, func() { fired <- time.Now() })
			defer stop()
			if n := runtime.NumGoroutine(); n != before {
				t.Errorf("context.AfterFunc started %d goroutines; want none (Value reveals the child's cancelCtx)", n-before)
			}
			<-c.Done()
			if at := <-fired; at.Sub(start) != time.Second || time.Since(start) != time.Second {
				t.Fatalf("AfterFunc ran %v, Done closed %v after the start; want both at 1s", at.Sub(start), time.Since(start))
			}
		})
	})
	t.Run("the parent's deadline and cancellation", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			parent, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			c := e.callCtx(parent)
			defer c.end()
			if d, _ := c.Deadline(); time.Until(d) != 100*time.Millisecond {
				t.Fatalf("Deadline in %v; want the parent's, 100ms", time.Until(d))
			}
			cancel()
			if err := c.Err(); !errors.Is(err, context.Canceled) || c.timedOut() {
				t.Fatalf("Err after the parent's cancel = %v, timedOut %v; want Canceled, not a timeout", err, c.timedOut())
			}
			<-c.Done()
		})
	})
}
