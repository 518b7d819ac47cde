package idemgrpc

import (
	"context"

	"github.com/idemkit/idem/internal/handlerctx"
	"google.golang.org/grpc/codes"
)

// Disposition is what the interceptor does with a key once its handler
// has answered: store the answer and replay it, release the key so a
// retry runs the handler again, or mark the key UNKNOWN so that nothing
// runs it again until the outcome is reconciled (idem.Options.Reconcile)
// or an operator resolves it (idem.Engine.Resolve).
type Disposition = handlerctx.Disposition

const (
	// DispositionStore records the answer (message or status with its
	// details); every retry gets it replayed.
	DispositionStore Disposition = handlerctx.Store
	// DispositionRelease deletes the key: the work provably did not take
	// effect, and a retry runs the handler again.
	DispositionRelease = handlerctx.Release
	// DispositionUnknown turns the key UNKNOWN: the work may have taken
	// effect and its result is not known. A retry gets UNKNOWN with the
	// ErrorInfo reason OUTCOME_UNKNOWN, never a second run.
	DispositionUnknown = handlerctx.Unknown
)

// DefaultStatusPolicy is the default Options.StatusPolicy. It follows
// idemhttp.DefaultStatusPolicy: release a key only when the status says
// the call was not processed, and never replay as final an answer that
// says nothing about the work.
//
//   - ABORTED: the service declares it did not do the work and invites
//     a retry at a higher level (the gRPC status code guide); grpc-go
//     never makes it on its own: release, the retry runs. (An ABORTED
//     with idem's KEY_IN_FLIGHT, a downstream idem service's answer
//     passed on, says the downstream work is running: the interceptor
//     turns the key UNKNOWN before asking the policy.)
//   - UNAVAILABLE and RESOURCE_EXHAUSTED: a handler that passes on the
//     error of a downstream call (`return nil, err`) passes on these as
//     grpc-go made them, and grpc-go makes them after the downstream call
//     may have run: UNAVAILABLE when the connection breaks under a call
//     that was sent, RESOURCE_EXHAUSTED when the answer is over the
//     receive limit. The status code guide warns that retrying
//     UNAVAILABLE is not safe for an operation that is not idempotent:
//     UNKNOWN. A handler that refuses before any work (load shedding, a
//     quota) says so: return idem.NotRun(err), or
//     SetDisposition(ctx, DispositionRelease, ...), and the key is released.
//   - DEADLINE_EXCEEDED and CANCELLED: the handler's work was cut off,
//     typically a downstream call that was sent and not answered; the
//     status code guide says an operation that changes state "may have
//     completed successfully" after DEADLINE_EXCEEDED. They are the
//     HTTP 504 of gRPC: UNKNOWN. (The handler runs on a context detached
//     from the caller's cancellation, so these come from its own work.)
//   - Everything else, OK, INTERNAL and UNKNOWN included, is stored and
//     replayed: the handler ran to an answer. INTERNAL and UNKNOWN (the
//     status grpc-go gives a handler's plain Go error) may come after a
//     side effect, and running the handler again to see is what
//     idempotency keys exist to avoid: they are the HTTP 500, which
//     Stripe and idemhttp store too. A caller wanting a fresh try uses a
//     new key.
//
// A release by this policy, or by any Options.StatusPolicy, is UNKNOWN
// instead (reason "status Aborted after a downstream step was sent") when
// the handler sent a downstream step: a call or request with a key
// derived from its scope (the client interceptor, idemclient.Propagator,
// idemclient.Retrying) that may have reached its server. The ABORTED may
// then be a downstream's, or the handler's own transaction's, after the
// step had its effect (a charge). A step that provably never left does
// not count.
func DefaultStatusPolicy(code codes.Code) Disposition {
	switch code {
	case codes.Aborted:
		return DispositionRelease
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Canceled:
		return DispositionUnknown
	}
	return DispositionStore
}

// SetDisposition overrides, for the call whose handler runs on ctx, what
// the interceptor does with the key after the handler returns, whatever
// its status: a handler that knows better than its status declares it
// here, e.g. DispositionUnknown after a downstream call that was sent and
// not answered. reason is kept with an UNKNOWN key (idem.Record.Reason)
// and shown to every caller that retries the key, in the message of its
// UNKNOWN status: it must hold nothing the caller may not see (no
// secrets, no internal addresses). The last call wins. It reports false, doing
// nothing, when ctx is not the context of a protected handler.
//
// DispositionRelease (as an error marked idem.NotRun) releases the key
// even after the handler sent a downstream step (see DefaultStatusPolicy):
// the handler then vouches that no step had an effect a second run would
// repeat.
//
// A handler error that wraps idem.ErrOutcomeUnknown (idem.OutcomeUnknown)
// makes the key UNKNOWN too, and a panic always does.
func SetDisposition(ctx context.Context, d Disposition, reason string) bool {
	return handlerctx.Set(ctx, d, reason)
}
