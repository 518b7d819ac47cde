package storekit_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mem(t *testing.T) store.Store {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// FailNext fails calls before the store sees them; LoseNext after their
// effect; both count down to none.
func TestFaulty(t *testing.T) {
	ctx := context.Background()
	f := &storekit.Faulty{Store: mem(t)}
	acquire := func(key string) (store.AcquireResult, error) {
		return f.Acquire(ctx, store.AcquireParams{ID: store.ID{Key: key}, Owner: "o-" + key, LeaseDuration: time.Minute, Retention: time.Minute})
	}
	if _, err := acquire("a"); err != nil {
		t.Fatalf("a Faulty with nothing set failed: %v", err)
	}
	f.FailNext(storekit.OpAcquire, 2)
	for range 2 {
		if _, err := acquire("b"); !errors.Is(err, storekit.ErrInjected) {
			t.Fatalf("FailNext: %v, want ErrInjected", err)
		}
	}
	if rec, err := f.Get(ctx, store.ID{Key: "b"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("a failed acquire reached the store: %+v, %v", rec, err)
	}
	if res, err := acquire("b"); err != nil || !res.Acquired {
		t.Fatalf("after two failures: %+v, %v; want acquired", res, err)
	}
	f.LoseNext(storekit.OpAcquire, 1)
	if _, err := acquire("c"); !errors.Is(err, storekit.ErrInjected) {
		t.Fatalf("LoseNext: %v, want ErrInjected", err)
	}
	if rec, err := f.Get(ctx, store.ID{Key: "c"}); err != nil || rec.State != store.StateProcessing {
		t.Fatalf("a lost reply's acquire did not take effect: %+v, %v", rec, err)
	}
	f.FailNext(storekit.OpGet, math.MaxInt)
	for range 3 {
		if _, err := f.Get(ctx, store.ID{Key: "c"}); !errors.Is(err, storekit.ErrInjected) {
			t.Fatalf("a store down for Get answered: %v", err)
		}
	}
	if _, err := acquire("d"); err != nil {
		t.Fatalf("a store down for Get failed an Acquire: %v", err)
	}
	f.FailNext(storekit.OpGet, 0)
	if _, err := f.Get(ctx, store.ID{Key: "c"}); err != nil {
		t.Fatalf("a store back up: %v", err)
	}
}

func TestDeadlineStore(t *testing.T) {
	d := storekit.NewDeadlineStore(mem(t))
	ctx := context.Background()
	res, err := d.Acquire(ctx, store.AcquireParams{ID: store.ID{Key: "k"}, Owner: "o", LeaseDuration: time.Minute, Retention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	want := time.Now().Add(time.Hour)
	cctx, cancel := context.WithDeadline(ctx, want)
	defer cancel()
	ref := store.LeaseRef{ID: store.ID{Key: "k"}, Owner: "o", Fence: res.Record.Fence}
	if err := d.Complete(cctx, store.CompleteParams{LeaseRef: ref, Retention: time.Minute, Result: store.Result{Status: 200}}); err != nil {
		t.Fatal(err)
	}
	if got := <-d.CompleteDeadline; !got.Equal(want) {
		t.Fatalf("deadline %v, want %v", got, want)
	}
}

// EachStore runs the memory store in a bubble, where waiting costs no
// real time.
func TestEachStoreBubblesTheMemoryStore(t *testing.T) {
	storekit.EachStore(t, func(t *testing.T, s store.Store) {
		if _, ok := s.(*memstore.Store); !ok {
			return
		}
		start := time.Now()
		time.Sleep(time.Hour) // the bubble's clock: no real time passes
		if took := time.Since(start); took != time.Hour {
			t.Fatalf("an hour's sleep took %v on the bubble's clock", took)
		}
	})
}

// Compare reports the baseline's time over the call's: a call that does
// more than its baseline is below 1.
func TestCompareReportsTheRatio(t *testing.T) {
	work := func(n int) storekit.Call {
		return func(context.Context, int64) error {
			time.Sleep(time.Duration(n) * time.Millisecond) // the call's work, not a wait for anything
			return nil
		}
	}
	r := testing.Benchmark(func(b *testing.B) {
		storekit.Compare(b, storekit.Pace{Workers: 2, Chunk: 10}, work(20), storekit.Baseline{Name: "light", Call: work(1)},
			storekit.Baseline{Name: "bare", Ratio: "x-bare", Call: work(0)})
	})
	if x := r.Extra["x_light"]; x <= 0 || x >= 0.5 {
		t.Errorf("x_light = %v; want the light call's share of the time, well under 1", x)
	}
	if _, ok := r.Extra["x-bare"]; !ok || r.Extra["light-ns/op"] <= 0 {
		t.Errorf("metrics %v; want x-bare and light-ns/op", r.Extra)
	}
}
