package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// Do's function gets the lease it runs under, and its context carries
// that lease and ends with it: its deadline is the lease's end, moved by
// each renewal.
func TestDoGivesTheFunctionItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mustMem(t), &idem.Options{LeaseDuration: 3 * time.Second, RenewEvery: time.Second})
		key := idem.Request{Tenant: "acme", Key: "job-1", NoFingerprint: true}
		start := time.Now()
		_, _, err := e.Do(context.Background(), key, func(ctx context.Context, l *idem.Lease) ([]byte, error) {
			if l == nil || l.ID() != key.ID() || l.Fence() <= 0 || l.Check() != nil {
				t.Fatalf("lease = %+v; want the held lease of %v", l, key.ID())
			}
			if got, ok := idem.LeaseFromContext(ctx); !ok || got != l {
				t.Errorf("LeaseFromContext in Do = %p, %t; want the function's lease %p", got, ok, l)
			}
			first, ok := ctx.Deadline()
			if !ok || !first.Equal(start.Add(3*time.Second)) {
				t.Errorf("deadline = %v, %t; want the lease's end %v", first, ok, start.Add(3*time.Second))
			}
			time.Sleep(1500 * time.Millisecond) // one renewal, at 1s
			if later, _ := ctx.Deadline(); !later.Equal(start.Add(4 * time.Second)) {
				t.Errorf("deadline after a renewal at 1s = %v; want %v", later.Sub(start), 4*time.Second)
			}
			return []byte("ok"), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := idem.LeaseFromContext(context.Background()); ok {
			t.Error("LeaseFromContext on a context without a lease = true")
		}
	})
}

// A caller's deadline that comes before the lease's end is the deadline.
func TestDoKeepsAnEarlierCallerDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mustMem(t), nil)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		want, _ := ctx.Deadline()
		_, _, err := e.Do(ctx, idem.Request{Key: "short", NoFingerprint: true}, func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
			if got, ok := ctx.Deadline(); !ok || !got.Equal(want) {
				t.Errorf("deadline = %v, %t; want the caller's %v, before the 30s lease ends", got, ok, want)
			}
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// A Do that meets a key in flight is told to come back when work like the
// engine's recent work would be done, not when the other lease ends.
func TestInFlightRetryAfterFollowsTheWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEngine(t, mustMem(t), &idem.Options{LeaseDuration: 30 * time.Second})
		ctx := context.Background()
		inFlight := func(key string, ran time.Duration) *idem.InFlightError {
			t.Helper()
			started, release := make(chan struct{}), make(chan struct{})
			done := make(chan error)
			go func() {
				_, _, err := e.Do(ctx, idem.Request{Key: key, NoFingerprint: true}, func(context.Context, *idem.Lease) ([]byte, error) {
					close(started)
					<-release
					return nil, nil
				})
				done <- err
			}()
			<-started
			time.Sleep(ran) // the other attempt has run this long
			_, _, err := e.Do(ctx, idem.Request{Key: key, NoFingerprint: true}, func(context.Context, *idem.Lease) ([]byte, error) {
				t.Error("ran while another attempt held the key")
				return nil, nil
			})
			var ife *idem.InFlightError
			if !errors.As(err, &ife) {
				t.Fatalf("Do while in flight = %v; want an *InFlightError", err)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			return ife
		}

		// Nothing measured yet: the rest of the other attempt's lease.
		if got := inFlight("first", time.Millisecond).RetryAfter; got != 30*time.Second-time.Millisecond {
			t.Errorf("RetryAfter before any measured work = %v; want the rest of the lease, %v", got, 30*time.Second-time.Millisecond)
		}
		for i := range 20 {
			_, _, err := e.Do(ctx, idem.Request{Key: fmt.Sprint("job-", i), NoFingerprint: true}, func(context.Context, *idem.Lease) ([]byte, error) {
				time.Sleep(5 * time.Millisecond)
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		// Work takes ~5ms (the first Do's 1ms weighs little by now); this
		// one has run 1ms of it.
		if got := inFlight("second", time.Millisecond).RetryAfter; got < 3*time.Millisecond || got > 5*time.Millisecond {
			t.Errorf("RetryAfter after 5ms works = %v; want the rest of a 5ms work, ~4ms, not the 30s lease", got)
		}
		// A work far slower than the usual: asked about again after a
		// quarter of its age, not every millisecond.
		if got := inFlight("slow", 2*time.Second).RetryAfter; got != 500*time.Millisecond {
			t.Errorf("RetryAfter of a work running 2s when works take 5ms = %v; want a quarter of its age, 500ms", got)
		}
	})
}

// completeFails is a real store whose Complete fails: the store went away
// after the work ran.
type completeFails struct{ store.Store }

func (completeFails) Complete(context.Context, store.CompleteParams) error {
	return errors.New("injected: connection reset")
}
