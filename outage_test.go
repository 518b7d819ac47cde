package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// outageStore injects a store outage into a real store. While an outage
// is on, every call either fails at once (refuse: a killed server, a
// refused connection) or gets no answer (stall: a cut link, a SIGSTOPped
// server; the call waits for its context, which is all a client can do,
// and, if its context has no end, for the link to come back, when the
// answer arrives late). With lands set, a stalled call takes effect in the
// real store before it stalls: the reply is what was lost.
type outageStore struct {
	store.Store
	mu    sync.Mutex
	mode  outageMode // guarded by mu
	lands bool       // guarded by mu
	over  chan struct{}
	// lateBy, when set, makes a stalled call its caller gave up on take
	// effect that long after the outage ends, as a command retransmitted
	// over a link that came back does; guarded by mu.
	lateBy time.Duration
	late   sync.WaitGroup // the late calls
}

type outageMode int

const (
	outageOff outageMode = iota
	outageRefuse
	outageStall
)

var errRefused = errors.New("injected: dial tcp: connection refused")

func newOutageStore(s store.Store) *outageStore { return &outageStore{Store: s} }

// outageEngine is an engine with opts on an outageStore around a memory store.
func outageEngine(t *testing.T, opts *idem.Options) (*outageStore, *idem.Engine) {
	s := newOutageStore(mustMem(t))
	return s, newEngine(t, s, opts)
}

// start begins an outage; end ends it.
func (s *outageStore) start(mode outageMode, lands bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode, s.lands, s.over = mode, lands, make(chan struct{})
}

func (s *outageStore) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode != outageOff {
		s.mode = outageOff
		close(s.over)
	}
}

func (s *outageStore) state() (outageMode, bool, chan struct{}, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode, s.lands, s.over, s.lateBy
}

// during runs call on the real store as the outage lets it.
func during[T any](s *outageStore, ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	mode, lands, over, lateBy := s.state()
	var zero T
	switch mode {
	case outageRefuse:
		return zero, errRefused
	case outageStall:
		var res T
		var err error
		if lands {
			res, err = call(context.WithoutCancel(ctx))
		}
		if done := ctx.Done(); done != nil {
			select {
			case <-done:
				if lateBy > 0 {
					s.late.Go(func() {
						<-over
						time.Sleep(lateBy)
						call(context.WithoutCancel(ctx))
					})
				}
				return zero, ctx.Err()
			case <-over:
			}
		} else {
			<-over
		}
		if lands {
			return res, err
		}
	}
	return call(ctx)
}

func (s *outageStore) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	return during(s, ctx, func(ctx context.Context) (store.AcquireResult, error) { return s.Store.Acquire(ctx, p) })
}

func (s *outageStore) Complete(ctx context.Context, p store.CompleteParams) error {
	_, err := during(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.Store.Complete(ctx, p) })
	return err
}

func (s *outageStore) Extend(ctx context.Context, p store.ExtendParams) error {
	_, err := during(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.Store.Extend(ctx, p) })
	return err
}

func (s *outageStore) Release(ctx context.Context, p store.LeaseRef) error {
	_, err := during(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.Store.Release(ctx, p) })
	return err
}

func (s *outageStore) MarkUnknown(ctx context.Context, p store.MarkUnknownParams) error {
	_, err := during(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.Store.MarkUnknown(ctx, p) })
	return err
}

func (s *outageStore) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	return during(s, ctx, func(ctx context.Context) (store.ClaimResult, error) { return s.Store.Claim(ctx, p) })
}

func (s *outageStore) Resolve(ctx context.Context, p store.ResolveParams) error {
	_, err := during(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.Store.Resolve(ctx, p) })
	return err
}

func (s *outageStore) ListUnknown(ctx context.Context, p idem.ListParams) (idem.ListPage, error) {
	return during(s, ctx, func(ctx context.Context) (idem.ListPage, error) { return s.Store.ListUnknown(ctx, p) })
}

func (s *outageStore) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	return during(s, ctx, func(ctx context.Context) (idem.Record, error) { return s.Store.Get(ctx, id) })
}

func (s *outageStore) Delete(ctx context.Context, p store.DeleteParams) (bool, error) {
	return during(s, ctx, func(ctx context.Context) (bool, error) { return s.Store.Delete(ctx, p) })
}

// defaultStoreTimeout is Options.StoreTimeout's documented default.
const defaultStoreTimeout = 2 * time.Second

// flush waits until e holds nothing: in a bubble, time stands still once
// the test's function returns, so what the engine still retries must be
// settled before.
func flush(t *testing.T, e *idem.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := idem.FlushHeld(e, ctx); err != nil {
		t.Fatal(err)
	}
}

// beginFailsClosed asserts that Begin fails with ErrStore within the
// store timeout, and reports whether it did.
func beginFailsClosed(t *testing.T, e *idem.Engine, req idem.Request) bool {
	t.Helper()
	start := time.Now()
	a, err := e.Begin(context.Background(), req)
	if a.Lease != nil {
		a.Lease.Release(context.Background())
	}
	if took := time.Since(start); !errors.Is(err, idem.ErrStore) || took > defaultStoreTimeout {
		t.Errorf("Begin on a stalled store = %v, %v after %v; want ErrStore within the %v store timeout", a.Outcome, err, took, defaultStoreTimeout)
		return false
	}
	return true
}

// A stalled store (a cut link, a paused server) gets no answer: Begin
// fails closed within the store timeout, it does not wait for the link to
// come back. The bubble's clock makes the bound exact.
func TestBeginOnAStalledStoreFailsWithinTheStoreTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, e := outageEngine(t, nil)
		s.start(outageStall, false)
		time.AfterFunc(time.Minute, s.end) // the link comes back a minute later
		beginFailsClosed(t, e, idem.Request{Key: "new", NoFingerprint: true})
		flush(t, e)
	})
}

// Every store call the engine makes has the same deadline: reads, admin
// calls and the finalize of work that ran.
func TestEveryStoreCallHasTheStoreTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, e := outageEngine(t, nil)
		ctx := context.Background()
		a := begin(t, e, idem.Request{Key: "running", NoFingerprint: true})
		s.start(outageStall, false)
		time.AfterFunc(time.Minute, s.end)
		id := idem.ID{Key: "running"}
		calls := []struct {
			name string
			call func() error
		}{
			{"Get", func() error { _, err := e.Get(ctx, id); return err }},
			{"Delete", func() error { _, err := e.Delete(ctx, idem.ID{Key: "other"}); return err }},
			{"ListUnknown", func() error { _, err := e.ListUnknown(ctx, idem.ListParams{}); return err }},
			{"Resolve", func() error { return e.Resolve(ctx, idem.ID{Key: "other"}, 1, nil) }},
			{"Complete", func() error { return a.Lease.Complete(ctx, idem.Result{Status: 200}) }},
		}
		for _, c := range calls {
			start := time.Now()
			err := c.call()
			if took := time.Since(start); took > defaultStoreTimeout {
				t.Errorf("%s on a stalled store answered %v after %v; want an answer within the %v store timeout", c.name, err, took, defaultStoreTimeout)
			}
		}
		flush(t, e)
	})
}

// The acquire took the key and its reply was lost in the stall: Begin
// fails closed, and the key it took is released once the store answers
// again, long before its lease would end, so the client's retry runs.
func TestStalledAcquireThatTookTheKeyIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, e := outageEngine(t, nil)
		req := idem.Request{Key: "orphan", Fingerprint: "fp"}
		s.start(outageStall, true)
		time.AfterFunc(3*time.Second, s.end)
		if !beginFailsClosed(t, e, req) {
			return
		}
		time.Sleep(5 * time.Second) // the store is back since 3s; the lease would end at 30s
		retry := begin(t, e, req)
		if retry.Outcome != idem.Acquired {
			t.Fatalf("retry 5s after the stall = %v %+v; want Acquired: the orphan's key was released", retry.Outcome, retry.Record)
		}
		retry.Lease.Release(context.Background())
		flush(t, e)
	})
}

// An acquire that got no answer and lands only after the store answers
// again (retransmitted over a link that came back): the engine keeps
// looking for it for a while, and releases it when it lands.
func TestStalledAcquireThatLandsLateIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, e := outageEngine(t, nil)
		req := idem.Request{Key: "late", Fingerprint: "fp"}
		s.start(outageStall, false)
		s.lateBy = 2 * time.Second // lands at 5s, when the store has answered for 2s
		time.AfterFunc(3*time.Second, s.end)
		if !beginFailsClosed(t, e, req) {
			return
		}
		s.late.Wait()
		flush(t, e)
		retry := begin(t, e, req)
		if retry.Outcome != idem.Acquired {
			t.Fatalf("retry after the late acquire landed = %v %+v; want Acquired: the orphan's key was released", retry.Outcome, retry.Record)
		}
		retry.Lease.Release(context.Background())
	})
}

// A result in hand outlives a store outage of 1.5s (a killed server that
// restarts): the retry that reaches this process during the outage gets
// the replay (and a mismatch for another request), and once the store is
// back it holds the result for every process.
func TestCompletionOutlivesAShortOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, e := outageEngine(t, nil)
		ctx := context.Background()
		req := idem.Request{Key: "charge", Fingerprint: "fp"}
		a := begin(t, e, req)
		s.start(outageRefuse, false)
		time.AfterFunc(1500*time.Millisecond, s.end)
		if err := a.Lease.Complete(ctx, idem.Result{Status: 201, Body: []byte("charged")}); err != nil {
			t.Errorf("Complete during the outage = %v; want nil: the engine holds the result and stores it later", err)
		}
		if r, err := e.Begin(ctx, req); err != nil || r.Outcome != idem.Replayed || string(r.Result.Body) != "charged" {
			t.Errorf("retry during the outage = %v, %v; want the held result replayed", r.Outcome, err)
		}
		if r, err := e.Begin(ctx, idem.Request{Key: "charge", Fingerprint: "other"}); err != nil || r.Outcome != idem.Mismatch {
			t.Errorf("another request with the key during the outage = %v, %v; want Mismatch", r.Outcome, err)
		}
		time.Sleep(3 * time.Second)   // the store is back at 1.5s; the lease would end at 30s
		other := newEngine(t, s, nil) // another process on the same store
		r := begin(t, other, req)
		if r.Outcome != idem.Replayed || r.Result.Status != 201 || string(r.Result.Body) != "charged" {
			t.Fatalf("retry at another process after the outage = %v %+v; want the 201 replayed, not a key in flight until its lease ends", r.Outcome, r.Record)
		}
		flush(t, e)
	})
}

// A MarkUnknown and a Release the store did not take are kept too: the
// key turns UNKNOWN with the owner's reason, or is released, as soon as
// the store is back, not when the lease ends.
func TestMarkUnknownAndReleaseOutliveAShortOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, e := outageEngine(t, nil)
		ctx := context.Background()
		marked, released := idem.Request{Key: "marked", Fingerprint: "fp"}, idem.Request{Key: "released", Fingerprint: "fp"}
		m, r := begin(t, e, marked), begin(t, e, released)
		s.start(outageRefuse, false)
		time.AfterFunc(1500*time.Millisecond, s.end)
		if err := m.Lease.MarkUnknown(ctx, "upstream timed out"); err != nil {
			t.Errorf("MarkUnknown during the outage = %v; want nil (held)", err)
		}
		if err := r.Lease.Release(ctx); err != nil {
			t.Errorf("Release during the outage = %v; want nil (held)", err)
		}
		if a, err := e.Begin(ctx, marked); err != nil || a.Outcome != idem.Unknown || a.Record.Reason != "upstream timed out" {
			t.Errorf("retry of the marked key during the outage = %v %+v, %v; want Unknown with the owner's reason", a.Outcome, a.Record, err)
		}
		time.Sleep(3 * time.Second)
		other := newEngine(t, s, nil)
		if a := begin(t, other, marked); a.Outcome != idem.Unknown || a.Record.Reason != "upstream timed out" {
			t.Errorf("marked key after the outage = %v %+v; want Unknown with the owner's reason", a.Outcome, a.Record)
		}
		a := begin(t, other, released)
		if a.Outcome != idem.Acquired {
			t.Fatalf("released key after the outage = %v %+v; want Acquired (released), not in flight until the lease ends", a.Outcome, a.Record)
		}
		a.Lease.Release(ctx)
		flush(t, e)
	})
}
