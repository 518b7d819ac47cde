package await

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// begin takes a key on a fresh engine and returns the engine, the request
// and a second attempt, in flight, at the same key.
func begin(t *testing.T) (*idem.Engine, idem.Request, *idem.Lease, idem.Attempt) {
	t.Helper()
	store, _ := memstore.New(nil)
	e, err := idem.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := idem.Request{Key: "k", Fingerprint: "fp"}
	first, err := e.Begin(context.Background(), req)
	if err != nil || first.Outcome != idem.Acquired {
		t.Fatalf("first attempt: %v %v", first.Outcome, err)
	}
	second, err := e.Begin(context.Background(), req)
	if err != nil || second.Outcome != idem.InFlight {
		t.Fatalf("second attempt: %v %v", second.Outcome, err)
	}
	return e, req, first.Lease, second
}

// A waiter is woken by Wake as soon as the key is finished, without
// waiting out a poll interval, and gets the replay.
func TestWakeEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, req, lease, att := begin(t)
		var w Waiters
		done := make(chan idem.Attempt)
		go func() {
			got, err := w.Turn(context.Background(), nil, e, req, att, time.Hour)
			if err != nil {
				t.Error(err)
			}
			done <- got
		}()
		synctest.Wait() // the waiter sleeps on its first poll
		if n := w.Len(); n != 1 {
			t.Fatalf("%d keys watched while one request waits; want 1", n)
		}
		start := time.Now()
		// Past the first polls, so that only Wake can end the wait early.
		time.Sleep(time.Second)
		synctest.Wait()
		if err := lease.Complete(context.Background(), store.Result{Status: 201}); err != nil {
			t.Fatal(err)
		}
		w.Wake(req.ID())
		got := <-done
		if got.Outcome != idem.Replayed || got.Result.Status != 201 {
			t.Fatalf("the waiter got %v; want the replay of 201", got.Outcome)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("the waiter ended %v after it started waiting; want at the Wake, 1s", waited)
		}
		if n := w.Len(); n != 0 {
			t.Fatalf("%d keys watched after the wait; want 0", n)
		}
	})
}

// The wait ends in flight when the time is up, and when the caller has
// gone; a nil *Waiters still polls.
func TestWaitEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, req, lease, att := begin(t)
		defer lease.Release(context.Background())
		var w *Waiters
		start := time.Now()
		got, err := w.Turn(context.Background(), nil, e, req, att, 300*time.Millisecond)
		if err != nil || got.Outcome != idem.InFlight {
			t.Fatalf("after the wait: %v %v; want in flight", got.Outcome, err)
		}
		if waited := time.Since(start); waited != 300*time.Millisecond {
			t.Fatalf("waited %v; want 300ms", waited)
		}
		gone := make(chan struct{})
		close(gone)
		start = time.Now()
		got, err = w.Turn(context.Background(), gone, e, req, att, time.Hour)
		if err != nil || got.Outcome != idem.InFlight || time.Since(start) != 0 {
			t.Fatalf("caller gone: %v %v after %v; want in flight at once", got.Outcome, err, time.Since(start))
		}
	})
}
