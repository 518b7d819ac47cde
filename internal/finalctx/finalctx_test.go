package finalctx

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func newFinalizeContext(d time.Duration) *Context {
	c := &Context{}
	c.Start(context.WithoutCancel(context.Background()), d)
	return c
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The finalize context behaves as context.WithTimeout does, though its
// timer starts only when Done is asked for. The cases run in synctest
// bubbles: their clock moves only when they wait, so the deadlines are
// exact and cost no real time.
func TestFinalizeContext(t *testing.T) {
	t.Run("Done closes at the deadline", func(t *testing.T) { synctest.Test(t, testFinalizeDone) })
	t.Run("Err sees the deadline without Done", func(t *testing.T) { synctest.Test(t, testFinalizeErr) })
	t.Run("cancel", func(t *testing.T) { synctest.Test(t, testFinalizeCancel) })
}

func testFinalizeDone(t *testing.T) {
	start := time.Now()
	c := newFinalizeContext(20 * time.Millisecond)
	defer c.Cancel()
	if err := c.Err(); err != nil {
		t.Fatalf("Err before the deadline: %v", err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the deadline")
	}
	if waited := time.Since(start); waited != 20*time.Millisecond {
		t.Errorf("Done closed after %v, want at the 20ms deadline", waited)
	}
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Err %v, want DeadlineExceeded", err)
	}
}

func testFinalizeErr(t *testing.T) {
	c := newFinalizeContext(time.Millisecond)
	defer c.Cancel()
	time.Sleep(time.Millisecond) // the bubble's clock: exactly to the deadline
	if err := c.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Err %v, want DeadlineExceeded", err)
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done not closed after Err reported the deadline")
	}
}

func testFinalizeCancel(t *testing.T) {
	c := newFinalizeContext(time.Hour)
	done := c.Done()
	child, stop := context.WithCancel(c) // a child waits on Done
	defer stop()
	c.Cancel()
	<-done
	<-child.Done()
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err %v, want Canceled", err)
	}
	if d, ok := c.Deadline(); !ok || time.Until(d) != time.Hour {
		t.Errorf("Deadline %v %v, want in an hour", d, ok)
	}
	c.Cancel() // twice is harmless
	select {
	case <-c.Done():
	default:
		t.Error("Done not closed after cancel")
	}
}
