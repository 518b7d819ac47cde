package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// With Options.KeyRetention a completed key outlives its result: past the
// retention Begin answers Expired (Do: ErrKeyExpired) and nothing runs,
// another fingerprint is still a Mismatch, Delete lets it run anew; past
// the key retention it runs again. The memory store's clock is moved.
func TestKeyRetentionExpiredOutcome(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	move := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	s, err := memstore.New(&memstore.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, s, &idem.Options{Retention: time.Hour, KeyRetention: 24 * time.Hour})
	if e.KeyRetention() != 24*time.Hour {
		t.Fatalf("KeyRetention() = %v", e.KeyRetention())
	}
	runs := 0
	work := func(context.Context, *idem.Lease) ([]byte, error) { runs++; return []byte("charged"), nil }
	req := idem.Request{Tenant: "acme", Key: "k", Fingerprint: "fp"}
	if _, _, err := e.Do(ctx, req, work); err != nil || runs != 1 {
		t.Fatalf("first Do: %v, %d runs", err, runs)
	}
	move(2 * time.Hour)
	att, err := e.Begin(ctx, req)
	if err != nil || att.Outcome != idem.Expired || att.Record.Result == nil || !att.Record.CompletedAt.Equal(now.Add(-2*time.Hour)) {
		t.Fatalf("Begin past the retention = %+v, %v; want Expired with the completion time", att, err)
	}
	if _, _, err := e.Do(ctx, req, work); !errors.Is(err, idem.ErrKeyExpired) || runs != 1 {
		t.Fatalf("Do past the retention = %v, %d runs; want ErrKeyExpired, 1 run", err, runs)
	}
	if att, err := e.Begin(ctx, idem.Request{Tenant: "acme", Key: "k", Fingerprint: "other"}); err != nil || att.Outcome != idem.Mismatch {
		t.Fatalf("Begin with another fingerprint = %v, %v; want Mismatch", att.Outcome, err)
	}
	move(23 * time.Hour)
	if _, _, err := e.Do(ctx, req, work); err != nil || runs != 2 {
		t.Fatalf("Do past the key retention: %v, %d runs; want a second run", err, runs)
	}
	move(2 * time.Hour)
	if ok, err := e.Delete(ctx, req.ID()); !ok || err != nil {
		t.Fatalf("Delete(EXPIRED) = %v, %v; want true", ok, err)
	}
	if _, _, err := e.Do(ctx, req, work); err != nil || runs != 3 {
		t.Fatalf("Do after Delete: %v, %d runs; want a third run", err, runs)
	}
}

// A key whose outcome is unknown is never forgotten by time: with the
// default options (Retention 24h, no key retention), a key marked UNKNOWN,
// and one whose lease ended under a crashed owner, are still UNKNOWN
// (never run again) ten days later; they were forgotten after 24h, and
// the next call ran the work again. Only settling ends them. The memory
// store runs on the bubble's clock.
func TestUnknownKeyIsNeverForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e := newEngine(t, mustMem(t), &idem.Options{RenewEvery: -1, Logger: slog.New(slog.DiscardHandler)})
		runs := 0
		work := func(context.Context, *idem.Lease) ([]byte, error) {
			runs++
			return nil, idem.OutcomeUnknown(errors.New("the connection dropped after the request was sent"), "")
		}
		marked := idem.Request{Key: "marked", Fingerprint: "fp"}
		if _, _, err := e.Do(ctx, marked, work); !errors.Is(err, idem.ErrOutcomeUnknown) || runs != 1 {
			t.Fatalf("first Do = %v, %d runs; want ErrOutcomeUnknown after one run", err, runs)
		}
		crashed := idem.Request{Key: "crashed", Fingerprint: "fp"}
		if a := begin(t, e, crashed); a.Outcome != idem.Acquired {
			t.Fatalf("Begin = %v; want Acquired", a.Outcome)
		} // and its owner never comes back
		for _, wait := range []time.Duration{2 * time.Hour, 10 * 24 * time.Hour} {
			time.Sleep(wait)
			for _, req := range []idem.Request{marked, crashed} {
				if _, _, err := e.Do(ctx, req, work); !errors.Is(err, idem.ErrOutcomeUnknown) || runs != 1 {
					t.Fatalf("Do(%s) %v later = %v, %d runs; want ErrOutcomeUnknown, no run", req.Key, wait, err, runs)
				}
			}
		}
		// Settling ends it: resolved as not executed, the next call runs.
		a := begin(t, e, marked)
		if err := e.Resolve(ctx, marked.ID(), a.Record.Fence, nil); err != nil {
			t.Fatalf("Resolve: %v", err)
		}
		if _, _, err := e.Do(ctx, marked, work); !errors.Is(err, idem.ErrOutcomeUnknown) || runs != 2 {
			t.Fatalf("Do after the key was resolved as not executed = %v, %d runs; want a second run", err, runs)
		}
	})
}
