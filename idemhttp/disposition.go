package idemhttp

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/handlerctx"
)

// Disposition is what the middleware does with a key once its handler has
// answered: store the response and replay it, release the key so a retry
// runs the handler again, or mark the key UNKNOWN so that nothing runs it
// again until the outcome is reconciled (idem.Options.Reconcile) or an
// operator resolves it (idem.Engine.Resolve).
type Disposition = handlerctx.Disposition

const (
	// DispositionStore records the response; every retry gets it replayed.
	DispositionStore Disposition = handlerctx.Store
	// DispositionRelease deletes the key: the work provably did not take
	// effect, and a retry runs the handler again.
	DispositionRelease = handlerctx.Release
	// DispositionUnknown turns the key UNKNOWN: the work may have taken
	// effect and its result is not known. A retry gets 503 outcome_unknown
	// (after a reconciliation, if one is configured), never a second run.
	DispositionUnknown = handlerctx.Unknown
)

// DefaultStatusPolicy is the default Options.StatusPolicy. The principle:
// release a key only when the status says the request was not processed,
// and never replay as final an answer that says nothing about the work.
//
//   - 425 Too Early and 429 Too Many Requests: the server declares it did
//     not process the request (RFC 8470, RFC 6585): release, the retry
//     runs.
//   - 401 Unauthorized, 403 Forbidden and 407 Proxy Authentication
//     Required: the request was not applied, it was refused before any
//     work (RFC 9110 §15.5.2, §15.5.4, §15.5.8); and 411 Length Required,
//     413 Content Too Large, 414 URI Too Long, 415 Unsupported Media Type
//     and 431 Request Header Fields Too Large: the server refused to
//     process the message itself (RFC 9110 §15.5.12 to §15.5.16, RFC 6585).
//     Released, as Stripe saves no result for a request that did not
//     start executing: the client corrects the request (or its
//     credentials) and sends it again; and a client with made-up
//     credentials, each its own tenant, cannot fill the store with answers
//     that say nothing ran.
//   - 502 Bad Gateway and 504 Gateway Timeout: a proxy inside the handler's
//     call chain lost the answer of what it called, which may have acted:
//     UNKNOWN.
//   - 408 Request Timeout: UNKNOWN. RFC 9110 §15.5.9 says the server did
//     not receive the whole request, but timeout middleware answers 408
//     at its limit while the handler goes on running (gin-contrib/timeout
//     and koa-timeout by default), and an application may map a
//     downstream's deadline to it; a released 408 let the retry charge
//     again. A server that answers 408 before reading the body declares it
//     as a 503 shedding load does (below).
//   - 503 Service Unavailable: UNKNOWN too, for a 503 does not prove that
//     nothing ran. http.TimeoutHandler answers 503 while the handler goes
//     on running (e.g. charging); Envoy and Istio answer 503 "upstream
//     connect error or disconnect/reset before headers" after the request
//     was delivered; Heroku's router answers 503 (H12) at its 30 s timeout
//     while the dyno goes on running. gRPC's UNAVAILABLE is UNKNOWN for
//     the same reason (idemgrpc). An application that sheds load with 503
//     before any work declares it: SetDisposition(ctx, DispositionRelease,
//     ...) or a StatusPolicy of its own (in the gateway, a route's
//     `statuses: {release: ["503"]}`).
//   - A downstream idem service's 409 key_in_flight, passed on (its
//     stripe-format 429 too, and Stripe's 409 idempotency_key_in_use),
//     says the downstream work is running: the middleware turns the key
//     UNKNOWN before asking the policy; any other 409 is stored.
//   - Everything else, 500 included, is stored and replayed: the handler
//     ran to an answer; a 500 may come after a side effect, and running it
//     again to see is what idempotency keys exist to avoid (Stripe stores
//     500s too). A client wanting a fresh try uses a new key.
//
// A release by this policy, or by any Options.StatusPolicy, is UNKNOWN
// instead (reason "status 403 after a downstream step was sent") when
// the handler sent a downstream step: a request with a key derived from
// its scope (idemclient.Propagator, idemclient.Retrying, idemgrpc's
// client interceptor) that may have reached its server. The status then
// proves nothing of the handler's work: a payment handler that charged
// through one provider may pass on a second downstream's 403 or 429. A
// step that provably never left (idemclient.Sent false) does not count,
// nor does a request without a derived key (the gateway's forward to its
// upstream, which is the handler's work itself).
func DefaultStatusPolicy(status int) Disposition {
	switch status {
	case http.StatusTooEarly, http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired,
		http.StatusLengthRequired, http.StatusRequestEntityTooLarge, http.StatusRequestURITooLong,
		http.StatusUnsupportedMediaType, http.StatusRequestHeaderFieldsTooLarge:
		return DispositionRelease
	case http.StatusRequestTimeout, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return DispositionUnknown
	}
	return DispositionStore
}

// SetDisposition overrides, for the request whose handler runs on ctx, what
// the middleware does with the key after the handler returns, whatever the
// status: a handler that knows better than its status declares it here,
// e.g. DispositionUnknown after a downstream call that was sent and not
// answered. reason is kept with an UNKNOWN key (idem.Record.Reason) and
// shown to every client that retries the key, in the detail of its 503
// outcome_unknown problem: it must hold nothing the client may not see
// (no secrets, no internal addresses). The last call wins. It reports false, doing
// nothing, when ctx is not the context of a protected handler.
//
// DispositionRelease releases the key even after the handler sent a
// downstream step (see DefaultStatusPolicy): the handler then vouches
// that no step had an effect a second run would repeat.
//
// A panic in the handler always makes the key UNKNOWN.
func SetDisposition(ctx context.Context, d Disposition, reason string) bool {
	return handlerctx.Set(ctx, d, reason)
}

// storeResultPolicy turns the StoreResult function of earlier versions
// into a status policy.
func storeResultPolicy(store func(int) bool) func(int) Disposition {
	return func(status int) Disposition {
		if store(status) {
			return DispositionStore
		}
		return DispositionRelease
	}
}

// answerUnknown answers a request whose key is UNKNOWN: 503, with a code
// that says the outcome is unknown, not failed: the work may have taken
// effect, and it will not run again. Retry-After says when a retry may
// find it settled: the engine's reconciliation timeout, else
// Options.UnknownRetryAfter, else nothing (only an operator settles it).
// The detail holds the key's reason, which the application or the engine
// chose for callers to see (SetDisposition, idem.OutcomeUnknown, a fixed
// phrase), never an error's raw text.
func (m *middleware) answerUnknown(w http.ResponseWriter, r *http.Request, att idem.Attempt) {
	after := att.RetryAfter
	if after <= 0 {
		after = m.unknownAfter
	}
	if after > 0 { // else nothing settles the key by itself: no hint (Options.UnknownRetryAfter)
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(after)))
	}
	detail := "an earlier request with this key may have taken effect, and its result is not known (" +
		att.Record.Reason + "); it will not run again until its outcome is reconciled or resolved"
	m.writeError(w, http.StatusServiceUnavailable, CodeOutcomeUnknown, detail)
	m.report(r, OutcomeKeyUnknown)
}

// leaseEnded answers a request whose lease ended before its handler could
// start, and releases the key: nothing ran.
func (m *middleware) leaseEnded(detached context.Context, w http.ResponseWriter, r *http.Request, l *idem.Lease, cause error) {
	ctx, cancel := context.WithTimeout(detached, idem.FinalizeTimeout)
	defer cancel()
	if err := l.Release(ctx); err != nil && !errors.Is(err, idem.ErrLeaseLost) {
		m.log.Error("idemhttp: releasing a key whose lease ended before the handler ran", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	m.wakeWaiters(l.ID())
	w.Header().Del(HeaderRepeatabilityResult) // it did not run: neither accepted nor rejected
	w.Header().Set("Retry-After", "1")
	m.writeError(w, http.StatusServiceUnavailable, CodeLeaseLost,
		"the idempotency lease ended before the request could run ("+cause.Error()+"); it did not run: retry with the same key")
	m.report(r, OutcomeLeaseLost)
}
