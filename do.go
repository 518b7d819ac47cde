package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/store"
)

// FinalizeTimeout bounds the Complete or Release that Do makes after the
// work, on a context detached from the caller's: work that ran must be
// recorded even when the caller has gone. Each store call within it is
// bounded by Options.StoreTimeout, and what the store has not taken by
// then is held (Options.MaxHeld); a held finalization is retried for at
// least FinalizeTimeout.
const FinalizeTimeout = 10 * time.Second

// Do runs fn at most once per key and returns its output; a later call with
// the same key gets the stored output back with replayed true, without
// running fn. fn gets the lease's context and fencing token.
//
// If fn returns an error the key is released, so a later call runs fn
// again, and the error is returned: return an error only when the work
// did not take effect. A lease that took over an attempt whose lease
// ended (TakeoverRun) is not released but marked UNKNOWN: that attempt
// may have had its effect. When it may have (a request sent and not answered,
// a timeout), wrap the error with OutcomeUnknown: the key turns UNKNOWN and
// no later call runs fn until the outcome is reconciled. An error that
// wraps a context error (context.Canceled, context.DeadlineExceeded) or
// the end of the lease (ErrLeaseExpired, ErrLeaseLost) is taken as an
// unknown outcome too: the work's context ended, the caller's going away or
// the lease's end cut whatever fn was doing, and a call cut in flight may
// have had its effect. Work that stopped before its side effect should say
// so with an error of its own. A panic in fn, and an output too large to
// store, turn the key UNKNOWN too, and the panic goes on.
//
// Another call in flight gives an *InFlightError (ErrInFlight); a different
// fingerprint gives ErrMismatch; an UNKNOWN key gives an *UnknownError
// (ErrOutcomeUnknown). A lease lost before the output was stored returns
// the output together with an error wrapping ErrLeaseLost: the work ran,
// and the key is in another attempt's hands.
func (e *Engine) Do(ctx context.Context, req Key, fn func(ctx context.Context, fence int64) ([]byte, error)) (out []byte, replayed bool, err error) {
	att, err := e.Begin(ctx, req)
	if err != nil {
		return nil, false, err
	}
	switch att.Outcome {
	case Replayed:
		// A copy: the stored body is shared (Record.Result), and the
		// caller owns what Do returns.
		return bytes.Clone(att.Result.Body), true, nil
	case InFlight:
		return nil, false, &InFlightError{RetryAfter: att.RetryAfter}
	case Mismatch:
		return nil, false, ErrMismatch
	case Unknown:
		return nil, false, &UnknownError{Record: att.Record}
	}
	l := att.Lease
	// The Complete, Release or MarkUnknown after the work runs on a context
	// detached from the caller's (work that ran must be recorded even when
	// the caller has gone), whose timeout starts when fn returns, however
	// long fn took.
	finalCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), FinalizeTimeout)
	}
	finished := false
	defer func() {
		if !finished { // fn panicked: it may have had its effect
			e.markUnknown(finalCtx, l, req, "panic in the work")
		}
	}()
	out, err = fn(l.Context(), l.Fence())
	finished = true
	switch {
	case errors.Is(err, ErrOutcomeUnknown) || cutShort(err):
		e.markUnknown(finalCtx, l, req, err.Error())
		return nil, false, err
	case err != nil && l.PreviousFence() != 0:
		// The work failed before its effect, but this lease took the key
		// over from an attempt whose outcome is unknown: a release would
		// let a retry run again what that attempt may have done.
		e.markUnknown(finalCtx, l, req, "failed after taking over an attempt of unknown outcome: "+err.Error())
		return nil, false, err
	case err != nil:
		fctx, cancel := finalCtx()
		defer cancel()
		if rerr := l.Release(fctx); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			e.log.Error("idem: release after failed work", "tenant", req.Tenant, "key", req.Key, "err", rerr)
		}
		return nil, false, err
	}
	fctx, cancel := finalCtx()
	defer cancel()
	if err := l.Complete(fctx, store.Result{Body: out}); err != nil {
		if errors.Is(err, ErrResultTooLarge) { // the work ran; its output cannot be kept
			e.markUnknown(finalCtx, l, req, err.Error())
		}
		return out, false, err
	}
	return out, false, nil
}

// cutShort reports whether err says the work's context ended under it:
// the work was stopped wherever it was, perhaps after its side effect.
func cutShort(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrLeaseExpired) || errors.Is(err, ErrLeaseLost)
}

func (e *Engine) markUnknown(finalCtx func() (context.Context, context.CancelFunc), l *Lease, req Key, reason string) {
	ctx, cancel := finalCtx()
	defer cancel()
	if err := l.MarkUnknown(ctx, reason); err != nil && !errors.Is(err, ErrLeaseLost) {
		e.log.Error("idem: marking the key UNKNOWN failed and could not be held; it stays PROCESSING until its lease ends, then turns UNKNOWN",
			"tenant", req.Tenant, "key", req.Key, "err", err)
	}
}

// OutcomeUnknown marks err as a failure after which the work's effect may
// have happened: Do then turns the key UNKNOWN instead of releasing it.
// errors.Is finds both ErrOutcomeUnknown and err in the result.
func OutcomeUnknown(err error) error {
	if err == nil {
		return ErrOutcomeUnknown
	}
	return &outcomeUnknown{err: err}
}

type outcomeUnknown struct{ err error }

func (u *outcomeUnknown) Error() string   { return "outcome unknown: " + u.err.Error() }
func (u *outcomeUnknown) Unwrap() []error { return []error{ErrOutcomeUnknown, u.err} }

// UnknownError is returned by Do for a key in state UNKNOWN: an earlier
// attempt may have had its effect, and no result is recorded. Record says
// which attempt (Fence), since when (CompletedAt) and why (Reason).
// errors.Is(err, ErrOutcomeUnknown) is true.
type UnknownError struct {
	Record store.Record
}

// Error says that the outcome is unknown, and why.
func (e *UnknownError) Error() string {
	return fmt.Sprintf("%v: key %q was left UNKNOWN by the attempt with fence %d (%s)",
		ErrOutcomeUnknown, e.Record.Key, e.Record.Fence, e.Record.Reason)
}

// Is reports ErrOutcomeUnknown.
func (e *UnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }
