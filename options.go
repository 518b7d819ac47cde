package idem

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Options configures an Engine. A nil *Options means all defaults.
type Options struct {
	// LeaseDuration is how long an attempt owns a key before another may take it
	// over, unless renewed. Zero means 30s.
	LeaseDuration time.Duration
	// Retention is how long a completed result is replayed. Zero means 24h.
	Retention time.Duration
	// KeyRetention is how long, from completion, a completed key is
	// remembered: past Retention its result is dropped and a tombstone
	// (StateExpired) stays until KeyRetention ends, so a late retry gets
	// the Expired outcome instead of running again. Zero, or not above
	// Retention, keeps none: the key ends with its result.
	//
	// Neither retention ends a key whose outcome may be unknown: an
	// UNKNOWN record (and a PROCESSING one, its lease running or ended)
	// is never forgotten by time, and a retry never runs it again, until
	// it is settled (a reconciliation, Engine.Resolve, its owner's late
	// Complete or Release, an operator's delete). Memory stays bounded by
	// the store's own bound (the memory store's MaxBytes: new keys fail
	// with ErrStoreFull) and is watched with idem_unknown_keys and its
	// alerts.
	KeyRetention time.Duration
	// RenewEvery is the heartbeat interval that extends a held lease while
	// work runs. Zero means a third of each lease; negative turns renewal
	// off. A lease shorter than RenewEvery renews at a third of itself.
	RenewEvery time.Duration
	// MaxResultBytes bounds a result body. Zero means 16 MiB.
	MaxResultBytes int
	// Logger receives one line per lost lease or failed finalize. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Observer receives events for metrics. Nil means none.
	Observer Observer
	// Takeover decides what an attempt does with a PROCESSING record whose
	// lease ended: its owner crashed or stalled, and may have had its
	// effect. The zero value, TakeoverUnknown, never runs such a key again
	// unasked.
	Takeover TakeoverPolicy
	// Reconcile, when set, is asked about a key whose outcome is unknown
	// (state UNKNOWN, or an ended lease under TakeoverUnknown) when a
	// retry meets it and in ReconcileAll's sweep: it answers whether
	// the work took effect, typically by looking the request up
	// downstream by its key or its fence (Record.Fence). One call per key
	// runs at a time, across every process sharing the store. Nil means
	// an UNKNOWN key stays so until Resolve or its retention ends.
	Reconcile func(ctx context.Context, rec Record) (Resolution, error)
	// ReconcileTimeout bounds one Reconcile call. Zero means 5s.
	ReconcileTimeout time.Duration
	// StoreTimeout bounds every store call the engine makes (acquire,
	// get, complete, release, mark unknown, extend, claim, resolve, list,
	// delete), the store client's own retries included: a call with no
	// answer by then has failed. A Begin that fails so returns ErrStore
	// and the work does not run (fail closed); Begin's acquire and its one
	// retry share one StoreTimeout. A finalize that fails so is held (see
	// MaxHeld). Zero means DefaultStoreTimeout (2s).
	StoreTimeout time.Duration
	// MaxHeld and MaxHeldBytes bound the finalizations the engine holds
	// in memory. A Complete, MarkUnknown or Release that the store did not
	// take within StoreTimeout (an outage, a restart, a failover) is kept
	// and retried in the background, with backoff: a Complete or
	// MarkUnknown until the store takes it or answers that the lease is
	// lost, however long (the store takes its owner's late word), a
	// Release for the rest of the lease and at least FinalizeTimeout (a
	// dropped one leaves the key UNKNOWN); and a retry of that key that
	// reaches this engine is answered from it (Begin: Replayed or
	// Mismatch for a held result, Unknown for a held MarkUnknown). When
	// the store answers again, the held results go first, then the
	// unknown outcomes, then the releases (the oldest first in each), so
	// that a crash soon after loses as few answers as can be. The
	// lease's owner and fence keep a late try harmless: if the key was
	// taken over meanwhile, the store refuses it and it is dropped. When
	// a bound is reached the finalize fails as a store error (the key
	// stays PROCESSING until its lease ends). Engine.Shutdown stores what is
	// held before the process exits; HoldObserver is told of every held
	// finalization. Zero means DefaultMaxHeld (10,000) and
	// DefaultMaxHeldBytes (64 MiB); a negative MaxHeld holds nothing.
	MaxHeld      int
	MaxHeldBytes int64
	// ReconcileRate bounds the Reconcile calls ReconcileAll starts, per
	// second. Zero means DefaultReconcileRate.
	ReconcileRate float64
	// ReconcileConcurrency bounds the Reconcile calls ReconcileAll has
	// in flight at once. Zero means DefaultReconcileConcurrency.
	ReconcileConcurrency int
	// ReconcileBackoff is how long ReconcileAll leaves a key alone
	// after a Reconcile call about it failed or answered unknown; it
	// doubles with each such answer in a row, up to ReconcileMaxBackoff.
	// The engine remembers it for up to 100,000 keys. Zero means
	// DefaultReconcileBackoff and DefaultReconcileMaxBackoff.
	ReconcileBackoff    time.Duration
	ReconcileMaxBackoff time.Duration
}

// TakeoverPolicy is what an attempt does with a key whose previous owner's
// lease ended before it completed or released the key.
type TakeoverPolicy uint8

const (
	// TakeoverUnknown turns the key UNKNOWN: the retry gets the Unknown
	// outcome, after Reconcile is asked if it is set (so: reconcile first,
	// else record UNKNOWN).
	TakeoverUnknown TakeoverPolicy = iota
	// TakeoverRun acquires the key and runs the work again; Lease.PreviousFence
	// says what was taken over, so the work can pass the previous fence
	// downstream. Use it only where the downstream deduplicates, or where
	// running twice is harmless.
	TakeoverRun
)

// Observer is told what the engine does, for metrics and traces. Its
// methods are called synchronously and must be fast.
type Observer interface {
	// StoreCall reports one store call: "acquire", "complete", "release",
	// "mark_unknown", "extend", "get", "delete", "claim", "resolve",
	// "list_unknown" or "release_orphan" (see HoldObserver), made on ctx
	// (for parenting trace spans).
	StoreCall(ctx context.Context, op string, elapsed time.Duration, err error)
	// LeaseEvent reports a renewal, a lost lease or an expired lease.
	LeaseEvent(id ID, ev LeaseEvent)
}

// ReconcileObserver is an Observer that is also told the result of every
// reconciliation: the verdict, or the error that left the key UNKNOWN.
type ReconcileObserver interface {
	Reconciled(id ID, v Verdict, err error)
}

// BeginObserver is an Observer that is also told what each Begin that
// did not fail decided, on Begin's context (for a request's own record of
// it: an access log line, its trace span's attributes): the key, the
// decision, and the fence of the attempt that decided it (the lease's
// when Acquired; else the record's that Begin met).
type BeginObserver interface {
	Began(ctx context.Context, id ID, d Decision, fence int64)
}

// LeaseEvent is what happened to a held lease.
type LeaseEvent uint8

const (
	LeaseRenewed LeaseEvent = iota + 1 // the heartbeat extended the lease
	LeaseLost                          // the store no longer holds the lease for this owner
	LeaseExpired                       // the deadline passed without a successful renewal
)

// String names the event.
func (ev LeaseEvent) String() string {
	switch ev {
	case LeaseRenewed:
		return "renewed"
	case LeaseLost:
		return "lost"
	case LeaseExpired:
		return "expired"
	}
	return fmt.Sprintf("LeaseEvent(%d)", uint8(ev))
}
