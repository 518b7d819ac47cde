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
// running fn.
//
// fn runs under the key's Lease, which it is given: pass Lease.Fence with
// its side effects (so that they can refuse an owner whose lease was taken
// over) and call Lease.Check just before one. fn's context is the lease's:
// it carries the lease (LeaseFromContext), it is cancelled when the lease
// is lost, when it expires, and when Do's ctx is, and its Deadline is the
// lease's end by the local clock as it stands (or ctx's deadline, when
// that comes first), which a renewal moves later: a call made with it
// (a gRPC call sends it on) ends with the lease. A timeout derived from
// it that is longer than the rest of the lease is bounded by the lease's
// end instead (context.WithTimeout keeps the earlier deadline), and a
// renewal postpones that end: keep the timeouts of fn's calls shorter
// than the lease.
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
// What Do returns, and what its caller does about it (Retryable is true
// exactly for the rows that say retry):
//
//	Do returns                         the work         the key       the caller
//	out, replayed false, nil           ran now          COMPLETED     acknowledge
//	out, replayed true, nil            ran before       COMPLETED     acknowledge
//	*InFlightError (ErrInFlight)       runs elsewhere   PROCESSING    retry after its RetryAfter
//	ErrStore, out nil                  did not run      unchanged     retry later: the store failed
//	fn's own error                     had no effect    released      retry
//	ErrMismatch                        did not run      another's     drop: the key was reused
//	ErrInvalidKey, ErrInvalidTenant,   did not run      unchanged     drop: the caller's bug
//	  ErrInvalidFingerprint,
//	  ErrInvalidRequest
//	*UnknownError (ErrOutcomeUnknown)  may have run     UNKNOWN       alert; Options.Reconcile or
//	                                   before                         Engine.Resolve settles it
//	fn's error wrapped with            may have run     UNKNOWN       alert, as above
//	  OutcomeUnknown, or a context
//	  or lease error; a panic
//	out, ErrLeaseLost                  ran              another's     acknowledge: its output is
//	                                                                  not stored
//	out, ErrResultTooLarge             ran              UNKNOWN       acknowledge, alert
//	out, ErrStore                      ran              PROCESSING,   acknowledge, alert: the store
//	                                                    then UNKNOWN  did not take the output
//
// A retry is always safe: whatever the error, a later Do never runs
// again what may have run.
func (e *Engine) Do(ctx context.Context, req Key, fn func(ctx context.Context, l *Lease) ([]byte, error)) (out []byte, replayed bool, err error) {
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
		return nil, false, &InFlightError{RetryAfter: e.works.retryAfter(att.Record, att.RetryAfter)}
	case Mismatch:
		return nil, false, ErrMismatch
	case Unknown:
		return nil, false, &UnknownError{Record: att.Record}
	case Expired:
		return nil, false, fmt.Errorf("%w: completed at %s, its result is no longer kept", ErrKeyExpired,
			att.Record.CompletedAt.UTC().Format(time.RFC3339))
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
	began := time.Now()
	out, err = fn(&workContext{Context: l.Context(), l: l}, l)
	finished = true
	e.works.add(time.Since(began))
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
		return out, false, ranError{err}
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

// Retryable reports whether calling Do again with the same key, later,
// may get further than the call that returned err: true for a key in
// flight (wait its InFlightError.RetryAfter), a store that failed before
// the work, and an error of the function's own (its key was released, so
// the next call runs it). It is false for nil, for what a retry meets
// again (ErrMismatch, an invalid key or request, an unknown outcome) and
// for the errors Do returns after the work ran (ErrLeaseLost,
// ErrResultTooLarge, ErrStore from storing its output). Do's documentation
// has the whole table. Whatever it says, a retry is safe: Do never runs
// again what may have run.
func Retryable(err error) bool {
	var ran ranError
	switch {
	case err == nil, errors.As(err, &ran):
		return false
	case errors.Is(err, ErrInFlight), errors.Is(err, ErrStore):
		return true
	case errors.Is(err, ErrMismatch), errors.Is(err, ErrOutcomeUnknown), cutShort(err),
		errors.Is(err, ErrResultTooLarge), errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidTenant),
		errors.Is(err, ErrInvalidFingerprint), errors.Is(err, ErrInvalidRequest), errors.Is(err, ErrLeaseClosed):
		return false
	}
	return true
}

// ranError is an error Do returns after the work ran (its output was not
// stored): Retryable is false for it, whatever it wraps.
type ranError struct{ err error }

func (r ranError) Error() string { return r.err.Error() }
func (r ranError) Unwrap() error { return r.err }

// workContext is the context of Do's function: the lease's, whose
// Deadline is the lease's end as it stands. It is not on every
// Lease.Context: there a timeout derived by a handler (the gateway's
// upstream timeout) longer than the rest of the lease would lose its own
// timer to the lease's end, which renewals keep moving.
type workContext struct {
	context.Context
	l *Lease
}

// Deadline is the lease's end by the local clock as of now, or the
// caller's deadline when that comes first. The heartbeat cancels the
// context when that end passes unrenewed.
func (c *workContext) Deadline() (time.Time, bool) {
	d := c.l.localDeadline()
	if pd, ok := c.Context.Deadline(); ok && pd.Before(d) {
		return pd, true
	}
	return d, true
}
