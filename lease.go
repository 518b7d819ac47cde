package idem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/valuectx"
	"github.com/idemkit/idem/store"
)

// Lease is the right to do the work for one key, held by one attempt.
// Call exactly one of Complete, Release or MarkUnknown when the work ends,
// and defer Close right after Begin, which marks the key UNKNOWN if none
// of them was called (a panic, a forgotten path).
type Lease struct {
	e            *Engine
	ref          store.LeaseRef
	fp           string // the attempt's fingerprint, for answering retries while a finalize is held
	lease        time.Duration
	retention    time.Duration
	keyRetention time.Duration // how long the key is remembered (store.CompleteParams.KeyRetention, and the life of an UNKNOWN record)
	renew        time.Duration // the heartbeat interval; negative: no renewal
	previous     int64         // the fence of the attempt taken over; zero when none

	carrier leaseCarrier    // the parent of ctx: the caller's context, carrying the lease
	ctx     context.Context // the work's context: cancelled when the lease can no longer be held
	cancel  context.CancelCauseFunc

	start    time.Time    // before the acquire was sent; carries the monotonic clock
	deadline atomic.Int64 // the local lease deadline, in nanoseconds since start

	// The heartbeat is one timer, not a goroutine: most work ends before
	// the first renewal is due, and then the lease cost nothing but the timer.
	hb          sync.Mutex // guards the heartbeat's state; not held during the store call
	hbTimer     *time.Timer
	hbStopped   bool
	hbCallAbort context.CancelFunc // aborts the renewal in flight, if any; nil when none is

	mu     sync.Mutex // serialises Complete and Release
	closed bool
}

// leaseKey is the context key under which a lease's Context carries it.
type leaseKey struct{}

// leaseCarrier is the caller's context with the lease as a value. It is a
// field of the Lease, so carrying the lease costs no allocation.
type leaseCarrier = valuectx.Context[leaseKey, *Lease]

// LeaseFromContext returns the lease that ctx runs under: the context
// given to the function of Engine.Do, Lease.Context and every context
// made from them, such as the context of a handler that idemhttp or
// idemgrpc runs under a lease.
func LeaseFromContext(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	return l, ok
}

// errLeaseFinished is the cause of a lease context after Complete or Release.
var errLeaseFinished = errors.New("idem: lease finished")

func (e *Engine) hold(parent context.Context, ref store.LeaseRef, fingerprint string, start time.Time, lease, retention, keyRetention time.Duration, takeover *store.Takeover) *Lease {
	renew := e.renew // a lease shorter than the configured interval renews at a third of itself
	if renew == 0 || renew >= lease {
		renew = lease / 3
	}
	l := &Lease{e: e, ref: ref, fp: fingerprint, lease: lease, retention: retention, keyRetention: keyRetention, renew: renew, start: start}
	if takeover != nil {
		l.previous = takeover.Fence
	}
	l.carrier = leaseCarrier{Context: parent, Carried: l}
	l.ctx, l.cancel = context.WithCancelCause(&l.carrier)
	l.deadline.Store(int64(lease))
	l.hb.Lock()
	l.hbTimer = time.AfterFunc(l.nextBeat(), l.beat)
	l.hb.Unlock()
	return l
}

// ID returns the tenant and key the lease holds.
func (l *Lease) ID() ID { return l.ref.ID }

// Fence returns the lease's fencing token. Pass it to every write the
// work makes (see the guardrail in store/pgstore), so that a store can
// refuse the writes of an owner whose lease was taken over.
func (l *Lease) Fence() int64 { return l.ref.Fence }

// PreviousFence is the fence of the attempt this lease took the key over
// from, when the key was PROCESSING under a lease that had ended
// (Options.Takeover is TakeoverRun); zero otherwise. That attempt's work
// may have had its effect: pass its fence downstream so the work can be
// looked up there.
func (l *Lease) PreviousFence() int64 { return l.previous }

// Context returns the context for the work: it is cancelled when Begin's
// context is, when the store reports the lease lost (cause ErrLeaseLost),
// when the lease deadline passes without renewal (cause ErrLeaseExpired),
// and after Complete or Release. Use context.Cause to tell them apart. It
// carries the lease (LeaseFromContext).
func (l *Lease) Context() context.Context { return l.ctx }

// Check reports whether the lease is still held, by the local clock, right
// now: nil, or ErrLeaseExpired when the deadline has passed, or the cause
// that ended Context. Call it just before a side effect: a worker that was
// paused (GC, SIGSTOP, a stalled call) sees its lease is over here even
// before the heartbeat has run to cancel Context.
func (l *Lease) Check() error {
	if err := l.ctx.Err(); err != nil {
		return context.Cause(l.ctx)
	}
	if l.untilDeadline() <= 0 {
		return ErrLeaseExpired
	}
	return nil
}

// localDeadline is when the lease ends by the local clock.
func (l *Lease) localDeadline() time.Time { return l.start.Add(time.Duration(l.deadline.Load())) }

func (l *Lease) untilDeadline() time.Duration {
	return time.Duration(l.deadline.Load()) - time.Since(l.start)
}

// nextBeat is when the heartbeat next has something to do: renew, or, when
// renewal is off or the deadline comes first, end the lease.
func (l *Lease) nextBeat() time.Duration {
	left := l.untilDeadline()
	if l.renew > 0 && l.renew < left {
		return l.renew
	}
	return max(left, 0)
}

// beat runs on the heartbeat timer: it extends the lease, and cancels the
// work's context when the lease is lost or its deadline passes. The deadline
// is kept by the local monotonic clock, counted from before the store saw
// the request, so it never ends later than the store's.
func (l *Lease) beat() {
	l.hb.Lock()
	defer l.hb.Unlock()
	if l.hbStopped || l.ctx.Err() != nil {
		return
	}
	left := l.untilDeadline()
	if left <= 0 {
		l.e.log.Warn("idem: lease expired before renewal", "tenant", l.ref.Tenant, "key", l.ref.Key, "fence", l.ref.Fence)
		l.e.leaseEvent(l.ref.ID, LeaseExpired)
		l.cancel(ErrLeaseExpired) // also aborts a renewal still in flight
		return
	}
	if l.hbCallAbort != nil { // the deadline timer fired early: a renewal is still in flight
		l.hbTimer.Reset(left)
		return
	}
	// The renewal is bounded by the lease's deadline and the store timeout.
	callDeadline := l.localDeadline()
	if t := time.Now().Add(l.e.storeTimeout); t.Before(callDeadline) {
		callDeadline = t
	}
	callCtx, abort := context.WithDeadline(l.ctx, callDeadline)
	l.hbCallAbort = abort
	// The lease ends at the local deadline even if the store call ignores
	// its context and hangs (a store whose client does not honour
	// deadlines, a server that stopped answering): the timer is armed for
	// the deadline while the call is out, and ends the lease when it fires.
	l.hbTimer.Reset(left)
	sent := time.Now()
	l.hb.Unlock() // stop may run meanwhile: it aborts the call
	err := l.e.store.Extend(callCtx, store.ExtendParams{LeaseRef: l.ref, LeaseDuration: l.lease, Retention: l.retention, KeyRetention: l.keyRetention})
	l.hb.Lock()
	abort()
	l.hbCallAbort = nil
	l.e.observe(l.ctx, "extend", sent, err)
	switch {
	case l.hbStopped || l.ctx.Err() != nil:
		return
	case err == nil:
		l.deadline.Store(int64(sent.Sub(l.start) + l.lease))
		l.e.leaseEvent(l.ref.ID, LeaseRenewed)
	case errors.Is(err, ErrLeaseLost):
		l.e.log.Warn("idem: lease lost during work", "tenant", l.ref.Tenant, "key", l.ref.Key, "fence", l.ref.Fence)
		l.e.leaseEvent(l.ref.ID, LeaseLost)
		l.cancel(ErrLeaseLost)
		return
	default: // a store hiccup: try again at the next beat, until the deadline
		l.e.log.Warn("idem: lease renewal failed", "tenant", l.ref.Tenant, "key", l.ref.Key, "err", err)
	}
	l.hbTimer.Reset(l.nextBeat())
}

// stop ends the heartbeat. A renewal in flight is aborted and its answer
// ignored; should it still land, it cannot touch a record that was completed
// or released since, because the owner and fence no longer match a
// PROCESSING record.
func (l *Lease) stop() {
	l.hb.Lock()
	defer l.hb.Unlock()
	l.hbStopped = true
	l.hbTimer.Stop()
	if l.hbCallAbort != nil {
		l.hbCallAbort()
	}
}

// Complete stores res as the result of the key, to be replayed to every
// later attempt, if this lease still holds the key. It does not end with
// ctx (whose values it keeps): work that ran is recorded even when its
// caller has gone, so pass the request's context as it is; each try is
// bounded by Options.StoreTimeout instead. It returns ErrLeaseLost
// (and changes nothing) when another owner took the key over, and
// ErrResultTooLarge (keeping the lease, so the caller can Release) when the
// body is over the limit. A store error is retried a few times within the
// store timeout; when the store has still not taken the result, the
// engine holds a copy, retries it in the background and answers this
// key's retries from it (Options.MaxHeld), and Complete returns nil. It
// returns an error wrapping ErrStore only when the hold is full.
func (l *Lease) Complete(ctx context.Context, res Result) error {
	if len(res.Body) > l.e.maxResult {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrResultTooLarge, len(res.Body), l.e.maxResult)
	}
	return l.finalize(ctx, &finalization{op: opComplete, ref: l.ref, fingerprint: l.fp, result: res, retention: l.retention, keyRetention: l.keyRetention})
}

// Release deletes the key so that a retry can run the work again, if this
// lease still holds it. Use it only after a failure that provably did not
// take effect; when the effect may have happened, use MarkUnknown. Like
// Complete, it does not end with ctx. After
// the lease ended, Release still deletes the record while it is this
// lease's own and untouched, or UNKNOWN only because a retry found the
// lease ended (reason "abandoned") and no reconciliation claims it; otherwise
// it returns ErrLeaseLost and changes nothing. A Release the store did
// not take is held and retried as Complete's result is: else the key
// would stay PROCESSING until its lease ends, and then turn UNKNOWN,
// although the work provably did not run. A lease that took over an
// attempt (PreviousFence is set) carries that attempt's unknown outcome:
// that its own work did not run proves nothing of the attempt it took
// over, so Release marks such a key UNKNOWN instead, as MarkUnknown does
// (a release would let the next request run again what that attempt may
// have done).
func (l *Lease) Release(ctx context.Context) error {
	if l.previous != 0 {
		return l.MarkUnknown(ctx, releasedTakeover)
	}
	return l.finalize(ctx, &finalization{op: opRelease, ref: l.ref, fingerprint: l.fp})
}

// releasedTakeover is the reason of a takeover's key that Release marks
// UNKNOWN.
const releasedTakeover = "a request that took over an ended attempt did not run; the attempt it took over may have"

// MarkUnknown records that the work's outcome is unknown: it may have had
// its effect (a request was sent and no answer came back, a timeout, a
// crash of something downstream), and no result is known. The key turns
// UNKNOWN, if this lease still holds it, and no retry runs the work again
// until Reconcile or Engine.Resolve says what happened. Like Complete, it
// does not end with ctx. reason is kept in Record.Reason (cut to 256
// bytes) and shown to the callers that retry the key (idemhttp,
// idemgrpc) and to operators: say what happened in words that hold no
// secret and no internal address, never an error's raw text. The reason
// "abandoned" is the store's own (a lease that ended mid-work) and is
// stored as "owner: abandoned": an owner's record with that reason could
// be released, and an owner that said "unknown" has said the effect may
// have happened. A MarkUnknown the
// store did not take is held and retried as Complete's result is, and
// this key's retries get the Unknown outcome from it: else they would be
// told the key is in flight until the lease ends.
func (l *Lease) MarkUnknown(ctx context.Context, reason string) error {
	return l.finalize(ctx, &finalization{op: opMarkUnknown, ref: l.ref, fingerprint: l.fp, reason: storedReason(reason), retention: l.retention, keyRetention: l.keyRetention})
}

// storedReason is the form MarkUnknown keeps reason in.
func storedReason(reason string) string {
	if reason == store.ReasonAbandoned {
		reason = "owner: " + store.ReasonAbandoned
	}
	return cut(reason, store.MaxReasonLength)
}

// cut returns s cut to at most n bytes, at a character's boundary.
func cut(s string, n int) string {
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "")
	}
	return s
}

// Close ends the lease if none of Complete, Release and MarkUnknown did:
// it marks the key UNKNOWN, because the work may have run (its holder
// panicked past the side effect, or returned by a path that recorded
// nothing), and never releases it. After Complete, Release or
// MarkUnknown, or once the lease was lost, it does nothing and returns
// nil. Defer it right after Begin, as a transaction's Rollback is
// deferred, and Release explicitly where the work provably did not run:
//
//	lease := att.Lease
//	defer lease.Close() // a panic or a forgotten path: UNKNOWN, never a second run
//	if err := lease.Check(); err != nil {
//		return lease.Release(ctx) // just before the side effect: nothing ran
//	}
//	receipt, err := charge(lease.Context(), lease.Fence())
//	...
//	return lease.Complete(ctx, Result{Body: receipt})
//
// It runs on Begin's context detached from its cancellation, bounded by
// FinalizeTimeout.
func (l *Lease) Close() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.carrier.Context), FinalizeTimeout)
	defer cancel()
	err := l.MarkUnknown(ctx, "the lease was closed without an outcome")
	if errors.Is(err, ErrLeaseClosed) || errors.Is(err, ErrLeaseLost) {
		return nil // finished already, or no longer this lease's to change
	}
	return err
}

func (l *Lease) finalize(ctx context.Context, f *finalization) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrLeaseClosed
	}
	l.stop()
	// The outcome is known now: it is recorded whether or not the caller
	// is still there (a cancelled request context must not drop it).
	err := l.e.finalizeNow(context.WithoutCancel(ctx), f)
	switch {
	case err == nil:
		l.closed = true
		l.cancel(errLeaseFinished)
		return nil
	case errors.Is(err, ErrLeaseLost):
		l.closed = true
		l.cancel(ErrLeaseLost)
		// The store changed nothing; the key is not this lease's to change
		// any more: taken over, resolved, deleted, expired, or UNKNOWN in a
		// way its owner may not undo (marked so, or claimed by a reconciler).
		l.e.log.Warn("idem: lease lost at "+f.op+"; the key is no longer this lease's and the store changed nothing",
			"tenant", l.ref.Tenant, "key", l.ref.Key, "fence", l.ref.Fence)
		l.e.leaseEvent(l.ref.ID, LeaseLost)
		return fmt.Errorf("%s: %w", f.op, ErrLeaseLost)
	case l.e.held.add(f, l.localDeadline(), err):
		// The outcome is known and kept: the store gets it when it answers.
		l.closed = true
		l.cancel(errLeaseFinished)
		return nil
	}
	return fmt.Errorf("%w: %s: %w", ErrStore, f.op, err)
}
