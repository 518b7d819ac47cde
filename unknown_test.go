package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// waitOut lets a short lease end: it waits until a retry no longer finds
// the key in flight. In the bubble one sleep does it; on Redis the
// server's clock may trail ours by a tick.
func waitOut(t *testing.T, e *idem.Engine, req idem.Request, l *idem.Lease) idem.Attempt {
	t.Helper()
	<-l.Context().Done()
	for deadline := time.Now().Add(10 * time.Second); ; {
		a := begin(t, e, req)
		if a.Outcome != idem.InFlight || time.Now().After(deadline) {
			return a
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAbandonedLeaseTurnsUnknown(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, &idem.Options{LeaseDuration: 50 * time.Millisecond, RenewEvery: -1})
		req := idem.Request{Key: "crashed", Fingerprint: "fp"}
		stalled := begin(t, e, req) // the worker charges the card, then stalls past its lease
		retry := waitOut(t, e, req, stalled.Lease)
		if retry.Outcome != idem.Unknown || retry.Record.State != idem.StateUnknown ||
			retry.Record.Reason != store.ReasonAbandoned || retry.Record.Fence != stalled.Lease.Fence() {
			t.Fatalf("retry after the lease ended = %v %+v; want Unknown, abandoned, with the stalled fence %d", retry.Outcome, retry.Record, stalled.Lease.Fence())
		}
		if again := begin(t, e, req); again.Outcome != idem.Unknown {
			t.Fatalf("second retry = %v; want Unknown: a retry never runs it", again.Outcome)
		}
		// The stalled worker wakes up and knows what happened: its late
		// completion of its own record is the truth, and is replayed.
		if err := stalled.Lease.Complete(context.Background(), idem.Result{Body: []byte("charged")}); err != nil {
			t.Fatalf("late Complete of the owner's own UNKNOWN record = %v; want accepted", err)
		}
		if r := begin(t, e, req); r.Outcome != idem.Replayed || string(r.Result.Body) != "charged" {
			t.Fatalf("after the late completion = %v %+v; want the replay", r.Outcome, r.Result)
		}
	})
}

// An owner whose lease ended and whose record a retry turned UNKNOWN
// (abandoned) knows its work did not run: its Release frees the key, and
// the next attempt runs.
func TestOwnerReleasesItsAbandonedRecord(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		var logs bytes.Buffer
		e := newEngine(t, s, &idem.Options{LeaseDuration: 50 * time.Millisecond, RenewEvery: -1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		req := idem.Request{Key: "stalled-before-work", Fingerprint: "fp"}
		stalled := begin(t, e, req) // the worker stalls before its side effect
		if retry := waitOut(t, e, req, stalled.Lease); retry.Outcome != idem.Unknown || retry.Record.Reason != store.ReasonAbandoned {
			t.Fatalf("retry after the lease ended = %v %+v; want Unknown, abandoned", retry.Outcome, retry.Record)
		}
		if err := stalled.Lease.Check(); err == nil {
			t.Fatal("Check after the lease ended = nil; want an error")
		}
		if err := stalled.Lease.Release(context.Background()); err != nil {
			t.Fatalf("Release of the owner's own abandoned record = %v; want nil", err)
		}
		if strings.Contains(logs.String(), "lost") {
			t.Fatalf("log after an accepted Release: %s; want no lost lease", logs.String())
		}
		next := begin(t, e, req)
		if next.Outcome != idem.Acquired || next.Lease.Fence() <= stalled.Lease.Fence() {
			t.Fatalf("attempt after the release = %v; want Acquired with a fence above %d", next.Outcome, stalled.Lease.Fence())
		}
		if err := next.Lease.Complete(context.Background(), idem.Result{Body: []byte("ran once")}); err != nil {
			t.Fatal(err)
		}
	})
}

var errNothingSent = errors.New("the lease ended before the charge: nothing sent")

// Do releases the key when the work fails after its lease ended and a
// retry turned the record UNKNOWN (abandoned): the work says it did not
// take effect, so the next call runs it.
func TestDoReleasesAbandonedRecordAfterFailedWork(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, &idem.Options{LeaseDuration: 50 * time.Millisecond, RenewEvery: -1})
		req := idem.Request{Key: "failed-late", Fingerprint: "fp"}
		var retry idem.Attempt
		_, _, err := e.Do(context.Background(), req, func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
			<-ctx.Done() // the lease ends before the work reaches its side effect
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				if retry = begin(t, e, req); retry.Outcome != idem.InFlight || time.Now().After(deadline) {
					break
				}
			}
			return nil, idem.NotRun(errNothingSent) // the work checked before its side effect, and stopped
		})
		if !errors.Is(err, errNothingSent) {
			t.Fatalf("Do = %v; want the work's error", err)
		}
		if retry.Outcome != idem.Unknown || retry.Record.Reason != store.ReasonAbandoned {
			t.Fatalf("retry while the work ran late = %v %+v; want Unknown, abandoned", retry.Outcome, retry.Record)
		}
		out, replayed, err := e.Do(context.Background(), req, func(context.Context, *idem.Lease) ([]byte, error) { return []byte("ran"), nil })
		if err != nil || replayed || string(out) != "ran" {
			t.Fatalf("Do after the release = %q, %v, %v; want the work run", out, replayed, err)
		}
	})
}

func TestLateCompletionOfAnUntouchedRecordIsAccepted(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, &idem.Options{LeaseDuration: 50 * time.Millisecond, RenewEvery: -1})
		req := idem.Request{Key: "late", NoFingerprint: true}
		a := begin(t, e, req)
		<-a.Lease.Context().Done() // nobody comes for the key meanwhile
		if err := a.Lease.Complete(context.Background(), idem.Result{Body: []byte("done")}); err != nil {
			t.Fatalf("Complete after the lease ended, record untouched = %v; want accepted", err)
		}
		if r := begin(t, e, req); r.Outcome != idem.Replayed {
			t.Fatalf("retry = %v; want Replayed", r.Outcome)
		}
	})
}

func TestOutcomeUnknownIsNeverRunAgain(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, nil)
		req := idem.Request{Tenant: "shop", Key: "order-1", NoFingerprint: true}
		cut := errors.New("connection reset after the request was written")
		_, _, err := e.Do(context.Background(), req, func(context.Context, *idem.Lease) ([]byte, error) {
			return nil, idem.OutcomeUnknown(cut, "")
		})
		if !errors.Is(err, cut) || !errors.Is(err, idem.ErrOutcomeUnknown) {
			t.Fatalf("Do = %v; want the work's error, marked unknown", err)
		}
		var runs atomic.Int32
		for range 3 {
			_, _, err = e.Do(context.Background(), req, func(context.Context, *idem.Lease) ([]byte, error) { runs.Add(1); return nil, nil })
			var ue *idem.OutcomeUnknownError
			if !errors.As(err, &ue) || ue.Record.Reason == "" || ue.Record.TTL != 0 {
				t.Fatalf("retry = %v; want an *OutcomeUnknownError with a reason, TTL 0 (kept until settled)", err)
			}
		}
		if runs.Load() != 0 {
			t.Fatalf("the work ran %d times after its outcome was unknown; want 0", runs.Load())
		}
	})
}

func TestStaleOwnerCannotMarkAnotherRecordUnknown(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, &idem.Options{LeaseDuration: 50 * time.Millisecond, RenewEvery: -1, Takeover: idem.TakeoverRun})
		req := idem.Request{Key: "stale-mark", LeaseDuration: 50 * time.Millisecond, NoFingerprint: true}
		stalled := begin(t, e, req)
		retryReq := req
		retryReq.LeaseDuration = time.Minute
		retry := waitOut(t, e, retryReq, stalled.Lease)
		if retry.Outcome != idem.Acquired {
			t.Fatalf("retry under TakeoverRun = %v; want Acquired", retry.Outcome)
		}
		if err := stalled.Lease.MarkUnknown(context.Background(), "late"); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("stale MarkUnknown = %v; want ErrLeaseLost", err)
		}
		rec, err := e.Get(context.Background(), req.ID())
		if err != nil || rec.State != idem.StateProcessing || rec.Owner != idem.LeaseOwner(retry.Lease) {
			t.Fatalf("record = %+v, %v; want the new owner's PROCESSING record untouched", rec, err)
		}
		retry.Lease.Release(context.Background())
	})
}

// TestDoNeverReleasesATakeover: under TakeoverRun, a retry takes over an
// attempt whose lease ended (it may have charged), and its own work fails
// before its charge. Do used to release the key, and the next call ran the
// work again although the first attempt's outcome was never known (found
// by internal/check: a double effect). The key turns UNKNOWN instead.
func TestDoNeverReleasesATakeover(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, &idem.Options{LeaseDuration: 50 * time.Millisecond, RenewEvery: -1, Takeover: idem.TakeoverRun})
		req := idem.Request{Key: "taken-over-then-failed", LeaseDuration: 50 * time.Millisecond, NoFingerprint: true}
		stalled := begin(t, e, req) // charges, then stalls past its lease
		<-stalled.Lease.Context().Done()
		retryReq := req
		retryReq.LeaseDuration = time.Minute
		var err error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			_, _, err = e.Do(context.Background(), retryReq, func(context.Context, *idem.Lease) ([]byte, error) {
				return nil, errors.New("refused before the charge")
			})
			if !errors.Is(err, idem.ErrInFlight) {
				break
			}
		}
		if err == nil || errors.Is(err, idem.ErrInFlight) {
			t.Fatalf("Do of the takeover = %v; want the work's error", err)
		}
		rec, err := e.Get(context.Background(), req.ID())
		if err != nil || rec.State != idem.StateUnknown {
			t.Fatalf("after the takeover's work failed: %+v, %v; want UNKNOWN (the attempt taken over may have charged)", rec, err)
		}
	})
}

// TestReleaseNeverReleasesATakeover: a lease that took over an ended
// attempt and whose own work did not run (the gateway's upstream
// answered 401, a status its policy releases) is released by idemhttp
// and the gateway with Lease.Release: the key must stay UNKNOWN, since
// the attempt taken over may have charged. Found by the product check
// (takeover: run, a retry refused with 401, then the corrected request
// ran again: two effects).
func TestReleaseNeverReleasesATakeover(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, &idem.Options{LeaseDuration: 50 * time.Millisecond, RenewEvery: -1, Takeover: idem.TakeoverRun})
		req := idem.Request{Key: "taken-over-then-refused", LeaseDuration: 50 * time.Millisecond, NoFingerprint: true}
		stalled := begin(t, e, req) // charges, then stalls past its lease
		<-stalled.Lease.Context().Done()
		retryReq := req
		retryReq.LeaseDuration = time.Minute
		var a idem.Attempt
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			a = begin(t, e, retryReq)
			if a.Outcome == idem.Acquired || time.Now().After(deadline) { // Redis's clock may trail ours by a tick
				break
			}
		}
		if a.Outcome != idem.Acquired || a.Lease.PreviousFence() == 0 {
			t.Fatalf("retry after the lease ended = %v (previous fence %v); want a takeover", a.Outcome, a.Lease)
		}
		if err := a.Lease.Release(context.Background()); err != nil {
			t.Fatalf("Release of the takeover: %v", err)
		}
		rec, err := e.Get(context.Background(), req.ID())
		if err != nil || rec.State != idem.StateUnknown {
			t.Fatalf("after the takeover's release: %+v, %v; want UNKNOWN (the attempt taken over may have charged)", rec, err)
		}
		if next := begin(t, e, req); next.Outcome != idem.Unknown {
			t.Fatalf("next request = %v; want Unknown: it must not run again", next.Outcome)
		}
	})
}

// markUnknown leaves req's key UNKNOWN and returns its record.
func markUnknown(t *testing.T, e *idem.Engine, req idem.Request) idem.Record {
	t.Helper()
	a := begin(t, e, req)
	if a.Outcome != idem.Acquired {
		t.Fatalf("Begin(%+v) = %v; want Acquired", req, a.Outcome)
	}
	if err := a.Lease.MarkUnknown(context.Background(), "upstream timed out"); err != nil {
		t.Fatalf("MarkUnknown: %v", err)
	}
	rec, err := e.Get(context.Background(), req.ID())
	if err != nil || rec.State != idem.StateUnknown || rec.Reason != "upstream timed out" {
		t.Fatalf("record after MarkUnknown = %+v, %v", rec, err)
	}
	return rec
}

func TestReconcileOnRetry(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		verdicts := map[string]idem.Resolution{
			"charged":      {Verdict: idem.VerdictCompleted, Result: idem.Result{Status: 201, Body: []byte("charge ch_1")}},
			"never-sent":   {Verdict: idem.VerdictNotExecuted},
			"provider-503": {Verdict: idem.VerdictUnknown},
		}
		var asked sync.Map
		e := newEngine(t, s, &idem.Options{Reconcile: func(ctx context.Context, rec idem.Record) (idem.Resolution, error) {
			asked.Store(rec.Key, rec.Fence)
			return verdicts[rec.Key], nil
		}})
		for key := range verdicts {
			markUnknown(t, e, idem.Request{Key: key, NoFingerprint: true})
		}
		if r := begin(t, e, idem.Request{Key: "charged", NoFingerprint: true}); r.Outcome != idem.Replayed || r.Result.Status != 201 || string(r.Result.Body) != "charge ch_1" {
			t.Fatalf("retry of a key reconciled completed = %v %+v; want the reconciled result replayed", r.Outcome, r.Result)
		}
		if r := begin(t, e, idem.Request{Key: "charged", NoFingerprint: true}); r.Outcome != idem.Replayed {
			t.Fatalf("second retry = %v; want Replayed from the store", r.Outcome)
		}
		r := begin(t, e, idem.Request{Key: "never-sent", NoFingerprint: true})
		if fence, _ := asked.Load("never-sent"); r.Outcome != idem.Acquired || r.Lease.Fence() <= fence.(int64) {
			t.Fatalf("retry of a key reconciled not executed = %v; want Acquired with a higher fence", r.Outcome)
		}
		r.Lease.Release(context.Background())
		if r := begin(t, e, idem.Request{Key: "provider-503", NoFingerprint: true}); r.Outcome != idem.Unknown || r.RetryAfter <= 0 {
			t.Fatalf("retry of a key still unknown = %v (retry after %v); want Unknown with a time to ask again", r.Outcome, r.RetryAfter)
		}
	})
}

func TestReconcileFailureLeavesTheKeyUnknown(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, &idem.Options{ReconcileTimeout: 50 * time.Millisecond,
			Reconcile: func(ctx context.Context, rec idem.Record) (idem.Resolution, error) {
				if rec.Key == "hangs" {
					<-ctx.Done() // an endpoint that never answers
					return idem.Resolution{Verdict: idem.VerdictNotExecuted}, ctx.Err()
				}
				return idem.Resolution{Verdict: idem.Verdict(7)}, nil // garbage
			}})
		for _, key := range []string{"hangs", "garbage"} {
			markUnknown(t, e, idem.Request{Key: key, NoFingerprint: true})
			if r := begin(t, e, idem.Request{Key: key, NoFingerprint: true}); r.Outcome != idem.Unknown {
				t.Fatalf("%s: retry = %v; want Unknown, never released", key, r.Outcome)
			}
		}
	})
}

func TestReconcileRunsOncePerKeyAtATime(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		var calls atomic.Int32
		entered, answer := make(chan struct{}), make(chan struct{})
		e := newEngine(t, s, &idem.Options{Reconcile: func(ctx context.Context, rec idem.Record) (idem.Resolution, error) {
			if calls.Add(1) == 1 {
				close(entered)
			}
			<-answer
			return idem.Resolution{Verdict: idem.VerdictCompleted, Result: idem.Result{Body: []byte("found")}}, nil
		}})
		req := idem.Request{Key: "popular", NoFingerprint: true}
		markUnknown(t, e, req)
		var wg sync.WaitGroup
		wg.Go(func() {
			if r := begin(t, e, req); r.Outcome != idem.Replayed {
				t.Errorf("the reconciling retry = %v; want Replayed", r.Outcome)
			}
		})
		<-entered
		for range 10 { // retries while the first reconciles: told to come back
			if r := begin(t, e, req); r.Outcome != idem.Unknown {
				t.Errorf("retry during the reconciliation = %v; want Unknown", r.Outcome)
			}
		}
		close(answer)
		wg.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("Reconcile called %d times; want once", n)
		}
	})
}

func TestResolveByAnOperator(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, nil)
		ctx := context.Background()
		rec := markUnknown(t, e, idem.Request{Tenant: "ops", Key: "k1", NoFingerprint: true})
		if err := e.Resolve(ctx, rec.ID, rec.Fence+1, nil); !errors.Is(err, idem.ErrStaleFence) {
			t.Fatalf("Resolve with another fence = %v; want ErrStaleFence", err)
		}
		if err := e.Resolve(ctx, idem.ID{Tenant: "ops", Key: "absent"}, 1, nil); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("Resolve of an absent key = %v; want ErrNotFound", err)
		}
		res := &idem.Result{Status: 200, Body: []byte("refund r_1")}
		if err := e.Resolve(ctx, rec.ID, rec.Fence, res); err != nil {
			t.Fatalf("Resolve completed: %v", err)
		}
		if err := e.Resolve(ctx, rec.ID, rec.Fence, nil); !errors.Is(err, idem.ErrNotUnknown) {
			t.Fatalf("Resolve of a COMPLETED key = %v; want ErrNotUnknown", err)
		}
		if r := begin(t, e, idem.Request{Tenant: "ops", Key: "k1", NoFingerprint: true}); r.Outcome != idem.Replayed || string(r.Result.Body) != "refund r_1" {
			t.Fatalf("retry after the resolution = %v; want the operator's result replayed", r.Outcome)
		}
		rec = markUnknown(t, e, idem.Request{Tenant: "ops", Key: "k2", NoFingerprint: true})
		if err := e.Resolve(ctx, rec.ID, rec.Fence, nil); err != nil {
			t.Fatalf("Resolve not executed: %v", err)
		}
		if r := begin(t, e, idem.Request{Tenant: "ops", Key: "k2", NoFingerprint: true}); r.Outcome != idem.Acquired || r.Lease.Fence() <= rec.Fence {
			t.Fatalf("retry after resolve-not-executed = %v; want Acquired with a higher fence", r.Outcome)
		} else {
			r.Lease.Release(ctx)
		}
	})
}

func TestReconcileAllSweepsEveryTenant(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, &idem.Options{Reconcile: func(ctx context.Context, rec idem.Record) (idem.Resolution, error) {
			switch rec.Key {
			case "done":
				return idem.Resolution{Verdict: idem.VerdictCompleted, Result: idem.Result{Body: []byte("ok")}}, nil
			case "never":
				return idem.Resolution{Verdict: idem.VerdictNotExecuted}, nil
			}
			return idem.Resolution{}, errors.New("provider lookup failed")
		}})
		a, b := "tenant-a", "tenant-b" // every test has a store of its own (Redis: its own prefix)
		markUnknown(t, e, idem.Request{Tenant: a, Key: "done", NoFingerprint: true})
		markUnknown(t, e, idem.Request{Tenant: b, Key: "never", NoFingerprint: true})
		markUnknown(t, e, idem.Request{Tenant: b, Key: "lookup-fails", NoFingerprint: true})
		st, err := e.ReconcileAll(context.Background())
		if err != nil || st.FirstError == nil || !strings.Contains(st.FirstError.Error(), "provider lookup failed") {
			t.Fatalf("sweep = %+v, %v; want the failed lookup's error kept", st, err)
		}
		if st.FirstError = nil; st != (idem.ReconcileStats{Completed: 1, NotExecuted: 1, Unknown: 1, Failed: 1}) {
			t.Fatalf("sweep = %+v; want 1 completed, 1 not executed, 1 unknown (failed)", st)
		}
		page, err := e.ListUnknown(context.Background(), idem.ListParams{Tenant: b})
		if err != nil || len(page.Records) != 1 || page.Records[0].Key != "lookup-fails" || page.Next != "" {
			t.Fatalf("tenant b's UNKNOWN keys after the sweep = %+v, %v; want only lookup-fails", page, err)
		}
		if page, err := e.ListUnknown(context.Background(), idem.ListParams{Tenant: a}); err != nil || len(page.Records) != 0 {
			t.Fatalf("tenant a's UNKNOWN keys after the sweep = %+v, %v; want none", page, err)
		}
		if _, err := e.ListUnknown(context.Background(), idem.ListParams{AllTenants: true, Limit: store.MaxListLimit + 1}); !errors.Is(err, idem.ErrInvalidRequest) {
			t.Fatalf("ListUnknown over the limit = %v; want ErrInvalidRequest", err)
		}
		if _, err := e.ListUnknown(context.Background(), idem.ListParams{AllTenants: true, After: "x"}); !errors.Is(err, idem.ErrInvalidCursor) || errors.Is(err, idem.ErrStore) {
			t.Fatalf("ListUnknown after a malformed cursor = %v; want ErrInvalidCursor, not ErrStore", err)
		}
	})
}

// An owner cannot give its own UNKNOWN record the store's reason
// "abandoned", which would let a Release delete a record whose owner said
// the effect may have happened.
func TestMarkUnknownReservesTheAbandonedReason(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, nil)
		req := idem.Request{Key: "owner-says-abandoned", Fingerprint: "fp"}
		a := begin(t, e, req)
		if err := a.Lease.MarkUnknown(context.Background(), store.ReasonAbandoned); err != nil {
			t.Fatal(err)
		}
		rec, err := e.Get(context.Background(), req.ID())
		if err != nil || rec.State != idem.StateUnknown || rec.Reason != "owner: abandoned" {
			t.Fatalf("record = %+v, %v; want UNKNOWN with reason %q", rec, err, "owner: abandoned")
		}
		if err := s.Release(context.Background(), store.LeaseRef{ID: req.ID(), Owner: rec.Owner, Fence: rec.Fence}); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("Release of a record its owner marked UNKNOWN = %v; want ErrLeaseLost", err)
		}
	})
}

// A work cut short by its context (the caller went away, the lease ended)
// may have had its effect: Do turns the key UNKNOWN, and the next call
// does not run the work again.
func TestDoTakesACutWorkAsUnknown(t *testing.T) {
	eachStore(t, func(t *testing.T, s store.Store) {
		e := newEngine(t, s, nil)
		req := idem.Request{Key: "caller-went-away", Fingerprint: "fp"}
		ctx, cancel := context.WithCancel(context.Background())
		runs := 0
		work := func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
			runs++
			cancel() // the charge left; the caller goes away before the answer
			<-ctx.Done()
			return nil, fmt.Errorf("post /charges: %w", ctx.Err())
		}
		if _, _, err := e.Do(ctx, req, work); !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v; want the work's context.Canceled", err)
		}
		_, _, err := e.Do(context.Background(), req, work)
		if runs != 1 || !errors.Is(err, idem.ErrOutcomeUnknown) {
			t.Fatalf("Do after the cut = %v, %d runs; want ErrOutcomeUnknown and 1 run", err, runs)
		}
	})
}
