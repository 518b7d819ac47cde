package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/idemkit/idem/internal/outcome"
)

// FinalizeTimeout bounds the Complete or Release that Do makes after the
// work, on a context detached from the caller's: work that ran must be
// recorded even when the caller has gone. Each store call within it is
// bounded by Options.StoreTimeout, and what the store has not taken by
// then is held (Options.MaxHeld): a held Complete until the store takes
// it, a held Release for at least FinalizeTimeout.
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
// What fn returns decides what becomes of the key:
//
//   - its output and nil: the output is stored and replayed to every
//     later call;
//   - an error wrapped with NotRun: the work provably did not take effect
//     (it stopped before its side effect: Lease.Check failed, the request
//     was never sent): the key is released, and a later call runs fn;
//   - an error wrapped with OutcomeUnknown: the effect may have happened
//     (a request sent and not answered, a timeout): the key turns UNKNOWN,
//     and no later call runs fn until the outcome is reconciled;
//   - any other error, not wrapped with NotRun: UNKNOWN too. A failure
//     proves nothing about the effect unless the work says so: a call cut
//     in flight (a context error, the end of the lease), a reset or a 5xx
//     while the answer was awaited may all have come after it. Lease.Check's
//     error, returned as it is, is such an error: return NotRun(err) for
//     it when nothing ran, and for every error the work raises before its
//     side effect (invalid input, a dependency refused before anything
//     was sent). idemclient.Sent tells a request that provably never left;
//     it marks nothing, since the work may have had effects before it.
//     Nor does the error of a Do that released its own key (Retryable
//     tells it): a work that ran a Do of its own for a sub-step, after
//     an effect, and returns its error keeps its key UNKNOWN; one with
//     no effect before it says so, return NotRun(err).
//
// A lease that took over an attempt whose lease ended (TakeoverRun) is
// never released but marked UNKNOWN: that attempt may have had its
// effect. A panic in fn, and an output too large to store, turn the key
// UNKNOWN too, and the panic goes on.
//
// The reason kept with an UNKNOWN key (Record.Reason, which idemhttp and
// idemgrpc show to the callers that retry the key, and the admin API to
// operators) is the one given to OutcomeUnknown, or else a fixed phrase
// that names the class of the failure ("the lease expired while the work
// ran"): never the error's text, which may hold a secret or an internal
// address. The caller of Do gets the error itself.
//
// What Do returns, what its caller does about it, and Retryable's answer
// (true exactly for the rows that say retry; TestDoErrorTable holds every
// row to a real call):
//
//	Do returns                         the work        the key         the caller                   Retryable
//	out, replayed false, nil           ran now         COMPLETED       acknowledge                  false
//	out, replayed true, nil            ran before      COMPLETED       acknowledge                  false
//	*InFlightError (ErrInFlight)       runs elsewhere  PROCESSING      retry after its RetryAfter   true
//	ErrStore, out nil                  did not run     unchanged       retry later                  true
//	ErrShutdown                        did not run     unchanged       retry on another engine      true
//	NotRun's error                     had no effect   released        retry                        true
//	ErrMismatch                        did not run     another's       drop: the key was reused     false
//	ErrKeyExpired                      ran before      result dropped  acknowledge: it never runs   false
//	                                                                   again, its result is gone
//	ErrInvalidKey, ErrInvalidTenant,   did not run     unchanged       drop: the caller's bug       false
//	  ErrInvalidFingerprint,
//	  ErrInvalidRequest
//	*OutcomeUnknownError (fn's own     may have run    UNKNOWN         alert; Options.Reconcile or  false
//	  error, ErrOutcomeUnknown)                                        Engine.Resolve settles it
//	out, ErrLeaseLost                  ran             another's       acknowledge: its output is   false
//	                                                                   not stored
//	out, *OutcomeUnknownError          ran             UNKNOWN         acknowledge, alert           false
//	  wrapping ErrResultTooLarge
//	out, ErrStore                      ran             PROCESSING,     acknowledge, alert: the      false
//	                                                   then UNKNOWN    store did not take the output
//
// *OutcomeUnknownError is the one error of an unknown outcome, on the call whose
// fn ended so (its Err is fn's error: a panic aside, fn wrapped it with
// OutcomeUnknown, or it is a context or lease error, or fn failed after a
// takeover) and on every later call with the key (Err nil). A retry is
// always safe: whatever the error, a later Do never runs again what may
// have run.
func (e *Engine) Do(ctx context.Context, req Request, fn func(ctx context.Context, l *Lease) ([]byte, error)) (out []byte, replayed bool, err error) {
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
		return nil, false, &OutcomeUnknownError{Record: att.Record}
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
			e.markUnknown(finalCtx, l, req, "panic in the work", nil)
		}
	}()
	began := time.Now()
	out, err = fn(&workContext{Context: l.Context(), l: l}, l)
	finished = true
	e.works.add(time.Since(began))
	switch {
	case err == nil:
	case errors.Is(err, ErrOutcomeUnknown) || !outcome.IsNotRun(err):
		// Only NotRun says the work stopped before its effect. Any other
		// error may have come after it: a provider's 502, a reset while
		// the answer was awaited, a commit whose reply was lost.
		return nil, false, e.markUnknown(finalCtx, l, req, unknownReason(err), err)
	case l.PreviousFence() != 0:
		// The work failed before its effect, but this lease took the key
		// over from an attempt whose outcome is unknown: a release would
		// let a retry run again what that attempt may have done.
		return nil, false, e.markUnknown(finalCtx, l, req, "the work failed after taking over an attempt of unknown outcome", err)
	default:
		fctx, cancel := finalCtx()
		defer cancel()
		if rerr := l.Release(fctx); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			e.log.Error("idem: release after failed work", "tenant", req.Tenant, "key", req.Key, "err", rerr)
		}
		// The NotRun spoke for this work: the error says "released" to
		// Retryable, and "not run" to no enclosing work's Do or handler.
		return nil, false, &outcome.Released{Err: err}
	}
	fctx, cancel := finalCtx()
	defer cancel()
	if err := l.Complete(fctx, Result{Body: out}); err != nil {
		if errors.Is(err, ErrResultTooLarge) { // the work ran; its output cannot be kept
			return out, false, e.markUnknown(finalCtx, l, req, "the output is over Options.MaxResultBytes", ranError{err})
		}
		return out, false, ranError{err}
	}
	return out, false, nil
}

// networkFailure reports whether err wraps a network error: a call the
// work made failed on its connection, which may have been after the
// request was sent and acted on (a reset or an EOF while the answer was
// awaited), so the failure proves nothing about the effect.
func networkFailure(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

// unknownReason is the reason kept with a key whose work ended with err,
// an unknown outcome: the application's (OutcomeUnknown), or the class of
// err. Never err's text: it may hold a secret (an API key in a URL) or an
// internal address, and the reason is shown to every caller that retries
// the key.
func unknownReason(err error) string {
	if r, ok := outcome.ChosenReason(err); ok {
		return r
	}
	switch {
	case errors.Is(err, ErrLeaseExpired):
		return "the lease expired while the work ran"
	case errors.Is(err, ErrLeaseLost):
		return "the lease was lost while the work ran"
	case errors.Is(err, context.DeadlineExceeded):
		return "the work's deadline passed while it ran"
	case errors.Is(err, context.Canceled):
		return "the work's context was cancelled while it ran"
	case networkFailure(err):
		return "a network call of the work failed, perhaps after it was sent"
	case errors.Is(err, ErrOutcomeUnknown):
		return "the work reported an unknown outcome"
	}
	return "the work failed, perhaps after its effect"
}

// markUnknown turns the key UNKNOWN with reason and returns the error
// that says so to Do's caller; cause is the work's error, if any.
func (e *Engine) markUnknown(finalCtx func() (context.Context, context.CancelFunc), l *Lease, req Request, reason string, cause error) *OutcomeUnknownError {
	ctx, cancel := finalCtx()
	defer cancel()
	if err := l.MarkUnknown(ctx, reason); err != nil && !errors.Is(err, ErrLeaseLost) {
		e.log.Error("idem: marking the key UNKNOWN failed and could not be held; it stays PROCESSING until its lease ends, then turns UNKNOWN",
			"tenant", req.Tenant, "key", req.Key, "err", err)
	}
	return &OutcomeUnknownError{Err: cause, Record: Record{ID: l.ID(), State: StateUnknown, Owner: l.ref.Owner,
		Fence: l.Fence(), Fingerprint: l.fp, CompletedAt: time.Now(), Reason: storedReason(reason)}}
}

// OutcomeUnknown marks err as a failure after which the work's effect may
// have happened: Do (and idemgrpc, for a handler's error) then turns the
// key UNKNOWN instead of releasing it. reason is kept with the key
// (Record.Reason) and shown to the callers that retry it and to
// operators: say what happened in words that hold no secret and no
// internal address ("the charge was sent and no answer came back");
// empty keeps a fixed phrase. err's own text is never kept nor shown.
// errors.Is finds both ErrOutcomeUnknown and err in the result.
func OutcomeUnknown(err error, reason string) error {
	if err == nil {
		err = errUnknownUnsaid
	}
	return &outcome.Unknown{Err: err, Reason: reason}
}

var errUnknownUnsaid = errors.New("the work's outcome is unknown")

// NotRun marks err as a failure that came before the work's effect: the
// work provably did not take effect, and Do (and idemgrpc, for a
// handler's error) releases the key, so a later call runs the work, even
// when err wraps a context error or the end of the lease, which Do
// otherwise reads as an unknown outcome. The pattern:
//
//	if err := l.Check(); err != nil { // just before the side effect
//		return nil, idem.NotRun(err)
//	}
//
// An error marked both NotRun and OutcomeUnknown is an unknown outcome,
// and so is a NotRun joined with an error not marked (errors.Join, or an
// fmt.Errorf with several %w): the safe reading wins. The mark speaks
// for the work that returns it, and stops at its Do: the error Do returns
// after releasing the key is not NotRun to an enclosing work's Do (or
// idemgrpc), whose work may have had effects before it. errors.Is and
// errors.As find err in the result.
func NotRun(err error) error {
	if err == nil {
		err = errNotRunUnsaid
	}
	return &outcome.NotRun{Err: err}
}

var errNotRunUnsaid = errors.New("the work did not run")

// OutcomeUnknownError is the error of an unknown outcome: an attempt at the key
// may have had its effect, and no result is recorded. Do returns it on
// the call whose work ended so (Err is the work's error; nil after a
// panic, which goes on) and on every later call with the key, which finds
// it UNKNOWN (Err nil). Record says which attempt (Fence), since when
// (CompletedAt) and why (Reason); on the first call it is the record as
// the engine asked the store to keep it. errors.Is(err,
// ErrOutcomeUnknown) is true, and errors.Is and errors.As find Err too.
type OutcomeUnknownError struct {
	Record Record
	Err    error
}

// Error says that the outcome is unknown, and why.
func (e *OutcomeUnknownError) Error() string {
	if e.Err != nil {
		cause := e.Err
		if u, ok := cause.(*outcome.Unknown); ok { // "outcome unknown" is said once
			cause = u.Err
		}
		return fmt.Sprintf("%v: key %q is UNKNOWN (%s): %v", ErrOutcomeUnknown, e.Record.Key, e.Record.Reason, cause)
	}
	return fmt.Sprintf("%v: key %q was left UNKNOWN by an earlier attempt (%s)", ErrOutcomeUnknown, e.Record.Key, e.Record.Reason)
}

// Is reports ErrOutcomeUnknown.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unwrap returns the work's error, if any.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Retryable reports whether calling Do again with the same key, later,
// may get further than the call that returned err: true for a key in
// flight (wait its InFlightError.RetryAfter), a store that failed before
// the work, an engine that was shut down, and a function's error marked
// NotRun (its key was released, so the next call runs it). It is false for
// nil, for what a retry meets again (ErrMismatch, ErrKeyExpired, an
// invalid key or request, an unknown outcome), for the errors Do returns
// after the work ran (ErrLeaseLost, ErrResultTooLarge, ErrStore from
// storing its output), and for any error Do did not return: what it does
// not know, it does not call retryable. Do's documentation has the whole
// table. Whatever it says, a retry is safe: Do never runs again what may
// have run.
func Retryable(err error) bool {
	var ran ranError
	var released *outcome.Released
	switch {
	case err == nil, errors.As(err, &ran), errors.Is(err, ErrOutcomeUnknown):
		return false
	case errors.As(err, &released), errors.Is(err, ErrInFlight), errors.Is(err, ErrStore), errors.Is(err, ErrShutdown):
		return true
	}
	return false
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
