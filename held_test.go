package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// holdEvents records what a HoldObserver is told.
type holdEvents struct {
	mu     sync.Mutex
	events []string
}

func (o *holdEvents) StoreCall(context.Context, string, time.Duration, error) {}
func (o *holdEvents) LeaseEvent(idem.ID, idem.LeaseEvent)                     {}
func (o *holdEvents) Held(id idem.ID, op string, ev idem.HoldEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, fmt.Sprintf("%s %s %s", id.Key, op, ev))
}

func (o *holdEvents) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return strings.Join(o.events, ", ")
}

// A held completion whose lease was taken over meanwhile is refused by
// the store (owner and fence) and dropped: the new owner's record stays.
func TestHeldCompletionOfALeaseTakenOverIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newOutageStore(mustMem(t))
		var obs holdEvents
		opts := &idem.Options{LeaseDuration: 100 * time.Millisecond, RenewEvery: -1, Takeover: idem.TakeoverRun}
		o := *opts
		o.Observer = &obs
		e := newEngine(t, s, &o)
		ctx := context.Background()
		req := idem.Request{Key: "k", Fingerprint: "fp"}
		a := begin(t, e, req)
		s.start(outageRefuse, false)
		if err := a.Lease.Complete(ctx, idem.Result{Status: 200, Body: []byte("first")}); err != nil {
			t.Fatalf("Complete during the outage = %v; want nil (held)", err)
		}
		time.Sleep(200 * time.Millisecond) // the lease ends; another process, which reaches the store, takes the key over
		other := newEngine(t, s.Store, opts)
		b := begin(t, other, req)
		if b.Outcome != idem.Acquired || b.Lease.PreviousFence() == 0 {
			t.Fatalf("takeover = %v; want Acquired taking over", b.Outcome)
		}
		if err := b.Lease.Complete(ctx, idem.Result{Status: 200, Body: []byte("second")}); err != nil {
			t.Fatal(err)
		}
		s.end()
		flush(t, e)
		if got, want := obs.String(), "k complete held, k complete dropped"; got != want {
			t.Errorf("hold events %q; want %q", got, want)
		}
		if r := begin(t, e, req); r.Outcome != idem.Replayed || string(r.Result.Body) != "second" {
			t.Fatalf("after the dropped completion = %v %q; want the new owner's result", r.Outcome, r.Result.Body)
		}
	})
}

// A held completion answers for its key only while the store has nothing
// newer: once an operator deleted the key elsewhere and it ran again, the
// store's newer attempt is the answer, before the held one's retry finds
// its lease gone (found by the check campaign on Redis).
func TestHeldCompletionYieldsToANewerAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, e := outageEngine(t, nil)
		ctx := context.Background()
		req := idem.Request{Key: "k", Fingerprint: "fp"}
		a := begin(t, e, req)
		s.start(outageRefuse, false)
		if err := a.Lease.Complete(ctx, idem.Result{Status: 200, Body: []byte("first")}); err != nil {
			t.Fatalf("Complete during the outage = %v; want nil (held)", err)
		}
		other := newEngine(t, s.Store, nil) // another process, which reaches the store
		if ok, err := other.ForceDelete(ctx, idem.ID{Key: "k"}); err != nil || !ok {
			t.Fatalf("ForceDelete = %v, %v", ok, err)
		}
		b := begin(t, other, req)
		if b.Outcome != idem.Acquired {
			t.Fatalf("after the delete = %v; want Acquired", b.Outcome)
		}
		if err := b.Lease.Complete(ctx, idem.Result{Status: 200, Body: []byte("second")}); err != nil {
			t.Fatal(err)
		}
		s.end() // the held completion's retry has not run yet
		if r := begin(t, e, req); r.Outcome != idem.Replayed || string(r.Result.Body) != "second" {
			t.Fatalf("Begin where the store has a newer attempt = %v %q; want the store's result %q", r.Outcome, r.Result.Body, "second")
		}
		flush(t, e)
	})
}

// The hold is bounded in count and in bytes: past either bound a
// finalize fails as before, as a store error.
func TestTheHoldIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newOutageStore(mustMem(t))
		var obs holdEvents
		e := newEngine(t, s, &idem.Options{MaxHeld: 2, MaxHeldBytes: 4 << 10, Observer: &obs})
		ctx := context.Background()
		a, b, c := begin(t, e, idem.Request{Key: "a", NoFingerprint: true}), begin(t, e, idem.Request{Key: "b", NoFingerprint: true}), begin(t, e, idem.Request{Key: "c", NoFingerprint: true})
		s.start(outageRefuse, false)
		if err := a.Lease.Complete(ctx, idem.Result{Body: make([]byte, 5<<10)}); !errors.Is(err, idem.ErrStore) {
			t.Errorf("Complete of 5 KiB into a 4 KiB hold = %v; want ErrStore", err)
		}
		if err := a.Lease.Complete(ctx, idem.Result{Body: []byte("small")}); err != nil {
			t.Errorf("Complete of a small result = %v; want nil (held)", err)
		}
		if err := b.Lease.Release(ctx); err != nil {
			t.Errorf("second finalize = %v; want nil (held)", err)
		}
		if err := c.Lease.MarkUnknown(ctx, "timeout"); !errors.Is(err, idem.ErrStore) {
			t.Errorf("third finalize into a hold of 2 = %v; want ErrStore", err)
		}
		s.end()
		flush(t, e)
		want := "a complete refused, a complete held, b release held, c mark_unknown refused, "
		if got := obs.String() + ", "; !strings.HasPrefix(got, want) || strings.Count(got, "stored") != 2 {
			t.Errorf("hold events %q; want %q and then both stored", got, want)
		}
		if r := begin(t, e, idem.Request{Key: "a", NoFingerprint: true}); r.Outcome != idem.Replayed || string(r.Result.Body) != "small" {
			t.Errorf("a after the outage = %v; want its held result replayed", r.Outcome)
		}
		c.Lease.MarkUnknown(ctx, "timeout") // the store is back: the caller's own retry
	})
}

// A store that stays down past the lease: the held completion is kept
// until the store takes it, however long after the lease's end (the store
// accepts its owner's late word: an unsettled record never ends by time),
// and this process answers the key's retries from it meanwhile. The
// hold gave it up once the lease would have ended (10 s after it was
// held, at the least), and the key was left UNKNOWN with its result lost.
func TestHeldCompletionOutlivesTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newOutageStore(mustMem(t))
		var obs holdEvents
		e := newEngine(t, s, &idem.Options{Observer: &obs})
		req := idem.Request{Key: "k", Fingerprint: "fp"}
		a := begin(t, e, req)
		s.start(outageRefuse, false)
		if err := a.Lease.Complete(context.Background(), idem.Result{Status: 201, Body: []byte("kept")}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(40 * time.Second) // past the 30 s lease and FinalizeTimeout
		if r := begin(t, e, req); r.Outcome != idem.Replayed || string(r.Result.Body) != "kept" {
			t.Fatalf("retry 40s into the outage, past the lease = %v %q; want the held result", r.Outcome, r.Result.Body)
		}
		time.Sleep(5 * time.Second)
		s.end() // 45 s: the store is back
		flush(t, e)
		if got, want := obs.String(), "k complete held, k complete stored"; got != want {
			t.Errorf("hold events %q; want %q", got, want)
		}
		rec, err := s.Store.Get(context.Background(), store.ID{Key: "k"})
		if err != nil || rec.State != store.StateCompleted || rec.Result == nil || rec.Result.Status != 201 || string(rec.Result.Body) != "kept" {
			t.Fatalf("the store's record after the outage = %+v, %v; want COMPLETED with the held result", rec, err)
		}
		other := newEngine(t, s.Store, nil) // another process: the store's answer, not this hold's
		if r := begin(t, other, req); r.Outcome != idem.Replayed || string(r.Result.Body) != "kept" {
			t.Fatalf("retry at another process after the outage = %v %q; want the result replayed", r.Outcome, r.Result.Body)
		}
	})
}

// A held MarkUnknown is kept past the lease too, until the store takes
// it: the key ends UNKNOWN with the work's reason, not abandoned.
func TestHeldMarkUnknownOutlivesTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newOutageStore(mustMem(t))
		e := newEngine(t, s, nil)
		req := idem.Request{Key: "k", Fingerprint: "fp"}
		a := begin(t, e, req)
		s.start(outageRefuse, false)
		if err := a.Lease.MarkUnknown(context.Background(), "upstream timeout"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(45 * time.Second)
		s.end()
		flush(t, e)
		rec, err := s.Store.Get(context.Background(), store.ID{Key: "k"})
		if err != nil || rec.State != store.StateUnknown || rec.Reason != "upstream timeout" {
			t.Fatalf("the store's record after the outage = %+v, %v; want UNKNOWN for the work's reason", rec, err)
		}
	})
}

// Flush stores what is held, or says how much is still held when its
// context ends first; an operator's Delete drops what is held for the key.
func TestFlushAndDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, e := outageEngine(t, nil)
		ctx := context.Background()
		a, b := begin(t, e, idem.Request{Key: "a", NoFingerprint: true}), begin(t, e, idem.Request{Key: "b", NoFingerprint: true})
		s.start(outageRefuse, false)
		a.Lease.Complete(ctx, idem.Result{Body: []byte("a")})
		b.Lease.Complete(ctx, idem.Result{Body: []byte("b")})
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := idem.FlushHeld(e, short); err == nil || !strings.Contains(err.Error(), "2 finalizations still held") {
			t.Fatalf("FlushHeld during the outage = %v; want an error counting 2 held", err)
		}
		s.end()
		if ok, err := e.ForceDelete(ctx, idem.ID{Key: "b"}); err != nil || !ok { // b is PROCESSING in the store: only a forced delete takes it
			t.Fatalf("Delete = %v, %v", ok, err)
		}
		flush(t, e)
		if r := begin(t, e, idem.Request{Key: "a", NoFingerprint: true}); r.Outcome != idem.Replayed {
			t.Errorf("a after Flush = %v; want Replayed", r.Outcome)
		}
		r := begin(t, e, idem.Request{Key: "b", NoFingerprint: true})
		if r.Outcome != idem.Acquired {
			t.Fatalf("b after an operator's Delete = %v; want Acquired: the held result went with the key", r.Outcome)
		}
		r.Lease.Release(ctx)
	})
}

// Do returns the work's output when its Complete is held, and the retry
// gets the output replayed.
func TestDoWithAHeldCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, e := outageEngine(t, nil)
		ctx := context.Background()
		req := idem.Request{Key: "job", NoFingerprint: true}
		runs := 0
		work := func(context.Context, *idem.Lease) ([]byte, error) {
			runs++
			s.start(outageRefuse, false) // the store fails right after the work
			return []byte("done"), nil
		}
		if out, replayed, err := e.Do(ctx, req, work); err != nil || replayed || string(out) != "done" {
			t.Fatalf("Do = %q %v %v; want the output", out, replayed, err)
		}
		if out, replayed, err := e.Do(ctx, req, work); err != nil || !replayed || string(out) != "done" || runs != 1 {
			t.Fatalf("second Do = %q %v %v after %d runs; want the output replayed, one run", out, replayed, err, runs)
		}
		s.end()
		flush(t, e)
	})
}

func TestHoldEventNames(t *testing.T) {
	got := fmt.Sprint(idem.HoldStarted, idem.HoldStored, idem.HoldDropped, idem.HoldRefused, idem.HoldEvent(9))
	if want := "held stored dropped refused HoldEvent(9)"; got != want {
		t.Fatalf("names = %q; want %q", got, want)
	}
}
