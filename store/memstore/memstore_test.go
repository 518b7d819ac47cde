package memstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newStore(t *testing.T, maxBytes int64) (*memstore.Store, *fakeClock) {
	clock := &fakeClock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	s, err := memstore.New(&memstore.Options{Clock: clock.Now, MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	return s, clock
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) (idem.Store, func(time.Duration)) {
			s, clock := newStore(t, 0) // a clock of its own: it ages this store only
			return s, clock.Advance
		},
	})
}

func TestBoundEvictsCompletedNeverProcessing(t *testing.T) {
	ctx := context.Background()
	s, clock := newStore(t, 4096)
	acquire := func(key string) (idem.LeaseRef, error) {
		res, err := s.Acquire(ctx, idem.AcquireParams{ID: idem.ID{Key: key}, Owner: "owner", LeaseDuration: time.Minute})
		if err != nil {
			return idem.LeaseRef{}, err
		}
		return idem.LeaseRef{ID: res.Record.ID, Owner: "owner", Fence: res.Record.Fence}, nil
	}
	// Two completed results, the first expiring sooner, fill most of the store.
	for i, key := range []string{"done-soon", "done-later"} {
		ref, err := acquire(key)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Complete(ctx, idem.CompleteParams{LeaseRef: ref, Result: idem.Result{Body: make([]byte, 1500)}, Retention: time.Duration(i+1) * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	var held []idem.LeaseRef
	for i := 0; ; i++ {
		ref, err := acquire("running-" + string(rune('a'+i)))
		if errors.Is(err, idem.ErrStoreFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ref)
		if i > 100 {
			t.Fatal("a 4 KiB store never filled up")
		}
	}
	if _, err := s.Get(ctx, idem.ID{Key: "done-soon"}); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("the result expiring soonest survived eviction: %v", err)
	}
	if _, err := s.Get(ctx, idem.ID{Key: "done-later"}); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("a completed result survived while PROCESSING records were refused: %v", err)
	}
	for _, ref := range held {
		rec, err := s.Get(ctx, ref.ID)
		if err != nil || rec.State != idem.StateProcessing {
			t.Fatalf("PROCESSING record %v was dropped by the bound: %v", ref.ID, err)
		}
	}
	// A result that cannot fit is refused and the lease stays held.
	err := s.Complete(ctx, idem.CompleteParams{LeaseRef: held[0], Result: idem.Result{Body: make([]byte, 8192)}, Retention: time.Hour})
	if !errors.Is(err, idem.ErrStoreFull) {
		t.Fatalf("oversized Complete = %v; want ErrStoreFull", err)
	}
	if err := s.Release(ctx, held[0]); err != nil {
		t.Fatalf("Release after refused Complete: %v", err)
	}
	if _, err := s.Acquire(ctx, idem.AcquireParams{ID: idem.ID{Key: "after-release"}, Owner: "o", LeaseDuration: time.Minute}); err != nil {
		t.Fatalf("Acquire after a release made room: %v", err)
	}
}

func TestNewRejectsNegativeBound(t *testing.T) {
	if _, err := memstore.New(&memstore.Options{MaxBytes: -1}); err == nil {
		t.Fatal("New accepted a negative MaxBytes")
	}
}
