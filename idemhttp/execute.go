package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/finalctx"
	"github.com/idemkit/idem/internal/handlerctx"
	"github.com/idemkit/idem/store"
)

// replay answers with a stored result, marked Idempotent-Replayed, and
// echoes the request's Idempotency-Key (Stripe's SDKs read it back).
func (m *middleware) replay(w http.ResponseWriter, r *http.Request, res *store.Result) {
	h := w.Header()
	for _, name := range m.replayHeaders {
		if vs, ok := res.Header[name]; ok {
			h[name] = slices.Clone(vs) // the stored result is shared and read-only
		}
	}
	if vs, ok := r.Header[HeaderKey]; ok {
		h[HeaderKey] = slices.Clone(vs) // validated: exactly one value
	}
	h.Set(HeaderReplayed, "true")
	w.WriteHeader(res.Status)
	w.Write(res.Body)
}

// execute runs the handler under the lease and records what it answered;
// detached is r's context without its cancellation.
func (m *middleware) execute(detached context.Context, next http.Handler, w http.ResponseWriter, r *http.Request, l *idem.Lease) {
	id := l.ID()
	if err := l.Check(); err != nil {
		// The lease ended before the handler could start (the acquire was
		// slow, or this process was paused): nothing ran, so the key is
		// released, and the handler never runs outside its lease.
		m.leaseEnded(detached, w, r, l, err)
		return
	}
	x := &exchange{capture: capture{ResponseWriter: w, m: m, replayBuffer: replayBuffers.Get().(*replayBuffer)}}
	c := &x.capture
	finalized := false
	reason := "the handler panicked"
	defer func() {
		if finalized {
			return
		}
		// A panic (or runtime.Goexit) in the handler, or in recording what
		// it answered; the panic goes on. It may have come after a side
		// effect (a reverse proxy aborts a broken upstream body so): the key
		// turns UNKNOWN and never runs again, and its lease (and renewal)
		// ends; unless its fate was recorded before the panic (the lease
		// is closed then). A context of its own: the finalize context of
		// the normal path may have been cancelled on the way here.
		ctx, cancel := context.WithTimeout(detached, idem.FinalizeTimeout)
		defer cancel()
		if err := l.MarkUnknown(ctx, reason); !errors.Is(err, idem.ErrLeaseClosed) {
			m.finalizeErr(r, err, OutcomeMarkedUnknown)
		}
		c.release()
		m.wakeWaiters(id)
	}()
	x.handlerCtx = handlerctx.Context{Context: l.Context(), Carried: &x.override}
	start := time.Now()
	next.ServeHTTP(c, r.WithContext(&x.handlerCtx))
	reason = "recording the handler's result panicked"
	m.durations.add(routeOf(r), time.Since(start))
	ctx := x.finalizeContext(detached)
	defer ctx.Cancel()
	m.finalize(ctx, r, l, c, &x.override)
	finalized = true
	c.release()
	m.wakeWaiters(id)
}

// exchange is what a protected request needs beyond the Request itself,
// in one allocation. It is not pooled: the handler's context and the
// finalize context may be kept by code the request called.
type exchange struct {
	capture    capture
	handlerCtx handlerctx.Context  // the handler's context
	override   handlerctx.Override // what the handler declared with SetDisposition
	final      finalctx.Context
}

// finalizeContext bounds the Complete or Release after the handler. It
// starts when the handler has returned, so that a slow handler leaves its
// finalize the whole FinalizeTimeout, and it does not end with the client:
// the result is recorded even when the client has gone.
func (x *exchange) finalizeContext(detached context.Context) *finalctx.Context {
	x.final.Start(detached, idem.FinalizeTimeout)
	return &x.final
}

// finalize stores the captured response, releases the key or marks it
// UNKNOWN, exactly once: as the handler declared (SetDisposition), else
// UNKNOWN for a downstream key in flight passed on (passedOnInFlight),
// else as the status policy says, except that the policy's release is
// UNKNOWN after the handler sent a downstream step (StepSent).
func (m *middleware) finalize(ctx context.Context, r *http.Request, l *idem.Lease, c *capture, o *handlerctx.Override) {
	status := c.finalStatus()
	d, reason := o.Get()
	if d == 0 {
		// A downstream idempotent service's "this key is running", passed
		// on, is UNKNOWN whatever the status policy says of its status.
		if reason = passedOnInFlight(status, c); reason != "" {
			d = DispositionUnknown
		} else {
			d, reason = m.statusDisposition(status), "status "+strconv.Itoa(status)
			if d == DispositionRelease && o.StepSent() {
				// The status may be a downstream's, passed on after
				// another downstream step had its effect (a charge): it
				// proves nothing of the handler's work.
				d, reason = DispositionUnknown, reason+" after a downstream step was sent"
			}
		}
	}
	switch {
	case d == DispositionUnknown:
		m.finalizeErr(r, l.MarkUnknown(ctx, reason), OutcomeMarkedUnknown)
	case d == DispositionRelease:
		outcome := OutcomeReleased
		if l.PreviousFence() != 0 { // Release keeps a takeover's key UNKNOWN: the attempt it took over may have run
			outcome = OutcomeMarkedUnknown
		}
		m.finalizeErr(r, l.Release(ctx), outcome)
	case c.hijacked:
		m.finalizeErr(r, l.Complete(ctx, notReplayable(0, "the connection was hijacked")), OutcomeExecuted)
	case c.overflow:
		m.finalizeErr(r, l.Complete(ctx, notReplayable(status, "streamed past the replay buffer")), OutcomeExecuted)
	default:
		// The store copies what it keeps (store.CompleteParams), so the
		// capture's buffers go back to the pool afterwards.
		err := l.Complete(ctx, c.result(status))
		if errors.Is(err, idem.ErrResultTooLarge) { // the engine's bound is below MaxResponseBuffer
			err = l.Complete(ctx, notReplayable(status, "larger than the store's result limit"))
		}
		m.finalizeErr(r, err, OutcomeExecuted)
	}
}

// statusDisposition is the status policy's word on status. A policy that
// panics has said nothing, and the handler's whole response is in hand:
// it is stored, which keeps what is known (a retry replays it, never runs
// the handler again) and lets the response reach the client. The panic
// is logged, not passed on: the connection would be cut under a response
// that is complete.
func (m *middleware) statusDisposition(status int) (d Disposition) {
	defer func() {
		if p := recover(); p != nil {
			m.log.Error("idemhttp: the StatusPolicy panicked; the response is stored", "status", status,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			d = DispositionStore
		}
	}()
	return m.policy(status)
}

func (m *middleware) finalizeErr(r *http.Request, err error, ok Outcome) {
	switch {
	case err == nil:
		m.report(r, ok)
	case errors.Is(err, idem.ErrLeaseLost): // the engine logged it; the new owner's record is untouched
		m.report(r, OutcomeLeaseLost)
	default:
		m.log.Error("idemhttp: recording the result failed and the engine could not hold it; the key stays in flight until its lease ends",
			"method", r.Method, "path", r.URL.Path, "err", err)
		m.report(r, OutcomeStoreError)
	}
}

func notReplayable(status int, reason string) store.Result {
	if status != 0 {
		reason = "status " + strconv.Itoa(status) + ", " + reason
	}
	return store.Result{Status: status, Header: http.Header{notReplayableHeader: {reason}}}
}
