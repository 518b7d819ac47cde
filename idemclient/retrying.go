package idemclient

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/ctxtime"
)

var (
	// ErrBodyNotReplayable is returned by Retrying when a retry is needed
	// but the request has a body and no GetBody to read it again. An empty
	// body is never sent in its place.
	ErrBodyNotReplayable = errors.New("idemclient: request body cannot be replayed for a retry (set Request.GetBody)")
	// ErrInvalidOptions is returned by NewRetrying for negative options.
	ErrInvalidOptions = errors.New("idemclient: invalid options")
)

// RetryOptions configures Retrying. A nil *RetryOptions means all defaults.
type RetryOptions struct {
	// MaxAttempts is the most requests sent for one RoundTrip, the first
	// included. Zero means 5; 1 turns retries off.
	MaxAttempts int
	// BaseDelay is the backoff ceiling before the first retry; it doubles
	// with each further retry, up to MaxDelay, and the wait is drawn
	// uniformly below it (full jitter). Zero means 100ms.
	BaseDelay time.Duration
	// MaxDelay caps one wait, whether computed or asked for by Retry-After.
	// Zero means 10s.
	MaxDelay time.Duration
	// MaxWait caps the sum of the waits of one RoundTrip: a retry that would
	// exceed it is not made, and the last response or error is returned.
	// Zero means 30s.
	MaxWait time.Duration
	// Sleep waits for d, or returns ctx's error as soon as ctx is done. Nil
	// means a timer. Tests inject one so that no test sleeps for real.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock that Retry-After dates are read against. Nil means
	// time.Now.
	Now func() time.Time
}

// Retrying is an http.RoundTripper for callers of APIs that honour
// Idempotency-Key. It gives a POST or PATCH without a key a random one (128
// bits and more from crypto/rand) or, under an idempotency scope (see
// ScopeFrom), the key Propagator would give it, failing with ErrNoStep as
// Propagator does when the context names no step; and then it resends the
// request, with that same key and the same body, after:
//
//   - a network error (the request may or may not have been executed: the
//     key makes resending it safe);
//   - 409 Conflict (the first attempt is still running), 429 Too Many
//     Requests and 5xx other than 501 and 505, which do not go away by
//     retrying.
//
// Under a scope, its attempts are steps of the handler, as Propagator's
// requests are: once one may have reached its server, the handler's
// status policy no longer releases its key.
//
// It honours Retry-After (seconds or an HTTP date) on these responses, and
// otherwise waits with capped exponential backoff and full jitter. It never
// retries 422 or any other 4xx. Requests with neither a key nor an idempotent
// method (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) are sent once.
//
// When the attempts end on a network error after some attempt may have
// reached the server (it got any response, even a 429 or a 503, or Sent
// says it may have left), RoundTrip returns an *OutcomeUnknownError whose
// Key is the key it was sent with (the one it made, too) and whose Err is
// the last error: send the request again under that key, never a new one,
// or it may run twice. When no attempt left (a Transport saw each dial
// refused), it returns the last error as it is, for which Sent is false
// (see Transport for the work that may then say idem.NotRun). An attempt
// Transport refused because the lease ended is not retried.
//
// The body is replayed through Request.GetBody, which http.NewRequest sets
// for in-memory bodies. Cancelling the request's context stops the retries
// at once; when an attempt's outcome is unknown, the error is still an
// *OutcomeUnknownError with the key (and matches the context's error).
// When the attempts or the wait budget run out, the last response is
// returned as it is (its Request's header holds the key it was sent with,
// one Retrying made too: a 500, 502 or 504 may follow the request's
// effect, so send it again under that key, never a new one), or the last
// error, unless an earlier attempt's
// outcome is unknown and the last answer does not settle it (a 409
// key_in_flight, a 503; and, not retried, any answer but a success or a
// replay: a 401 or a 302 may come from in front of the server): then an
// *OutcomeUnknownError, whose Err names that answer. Every response it
// discards is drained and closed. When the last response says that the request's
// outcome is unknown (a problem response with code outcome_unknown,
// upstream_no_response or upstream_timeout, or a Stripe-shaped error with
// that idem_code: it may have taken effect, and
// the server will not run it again), RoundTrip returns an
// *OutcomeUnknownError instead: the request did not fail, and its result
// may still come, to a later retry with the same key. Such an answer is
// retried only when it carries Retry-After (the server reconciles, and a
// retry may find the result); without one, nothing settles the key but
// an operator, and RoundTrip returns at once rather than wait for
// nothing. idemgrpc's client interceptor follows the same policy.
type Retrying struct {
	base        http.RoundTripper
	maxAttempts int
	baseDelay   time.Duration
	maxDelay    time.Duration
	maxWait     time.Duration
	sleep       func(context.Context, time.Duration) error
	now         func() time.Time
}

// NewRetrying returns a Retrying that sends through base (nil means
// http.DefaultTransport).
func NewRetrying(base http.RoundTripper, opts *RetryOptions) (*Retrying, error) {
	var o RetryOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxAttempts < 0 || o.BaseDelay < 0 || o.MaxDelay < 0 || o.MaxWait < 0 {
		return nil, fmt.Errorf("%w: MaxAttempts, BaseDelay, MaxDelay and MaxWait must not be negative", ErrInvalidOptions)
	}
	r := &Retrying{
		base:        base,
		maxAttempts: cmp.Or(o.MaxAttempts, 5),
		baseDelay:   cmp.Or(o.BaseDelay, 100*time.Millisecond),
		maxDelay:    cmp.Or(o.MaxDelay, 10*time.Second),
		maxWait:     cmp.Or(o.MaxWait, 30*time.Second),
		sleep:       o.Sleep,
		now:         o.Now,
	}
	if r.base == nil {
		r.base = http.DefaultTransport
	}
	if r.sleep == nil {
		r.sleep = ctxtime.Sleep
	}
	if r.now == nil {
		r.now = time.Now
	}
	return r, nil
}

// RoundTrip implements http.RoundTripper.
func (r *Retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	out := req.Clone(ctx) // a RoundTripper must not modify the caller's request
	send := r.base.RoundTrip
	if keyOf(out.Header) == "" {
		key, derived, err := newKey(req)
		if err != nil {
			return nil, refuse(req, err)
		}
		if key != "" {
			out.Header.Set(HeaderKey, key)
		}
		if derived { // a step of the handler whose scope it is (see Propagator)
			send = func(req *http.Request) (*http.Response, error) { return sendStep(r.base, req) }
		}
	}
	if keyOf(out.Header) == "" && !idempotentMethod(req.Method) {
		return r.base.RoundTrip(out)
	}
	var waited time.Duration
	// pending is the last attempt whose outcome is unknown. Once one is,
	// every way RoundTrip ends short of an answer that settles it returns
	// it, with the key, which the caller needs to ask for the result (a
	// key Retrying made is known nowhere else): a later 409 key_in_flight,
	// a load balancer's 503 or a cancelled wait says nothing of it.
	var pending *OutcomeUnknownError
	// reached: some attempt may have reached the server, so that a later
	// network error cannot say that the request did not run. An attempt
	// that got any response did, whatever its status: a 502 or 504 may
	// come from a proxy after its upstream ran the request, and a 409,
	// 429 or 503 is not proof enough that nothing ran. One that failed
	// without a response may have, unless Sent says nothing was sent. A
	// redirect's request (http.Client sets its Response) follows one that
	// reached a server.
	reached := req.Response != nil
	for attempt := 1; ; attempt++ {
		resp, err := send(out)
		reached = reached || err == nil || Sent(err)
		ue := unknownError(out, resp, err, attempt, reached)
		if ue != nil {
			pending = ue
		} else if pending != nil {
			pending.Attempts = attempt
		}
		if !retryable(resp, err) || attempt >= r.maxAttempts || unknownUnsettled(resp) {
			return last(resp, err, pending, ue != nil)
		}
		if ctx.Err() != nil {
			discard(resp)
			return nil, stopped(out, attempt, pending, reached, fmt.Errorf("idemclient: %s %s: %w", req.Method, req.URL.Redacted(), ctx.Err()))
		}
		wait := r.wait(attempt, resp)
		if waited+wait > r.maxWait {
			return last(resp, err, pending, ue != nil)
		}
		body, bodyErr := nextBody(req)
		if bodyErr != nil {
			discard(resp)
			return nil, stopped(out, attempt, pending, reached, fmt.Errorf("idemclient: %s %s: %w, to retry after %s", req.Method, req.URL.Redacted(), bodyErr, outcome(resp, err)))
		}
		discard(resp)
		if err := r.sleep(ctx, wait); err != nil {
			if body != nil {
				body.Close()
			}
			return nil, stopped(out, attempt, pending, reached, fmt.Errorf("idemclient: %s %s: waiting to retry: %w", req.Method, req.URL.Redacted(), err))
		}
		waited += wait
		out = out.Clone(ctx)
		out.Body = body
	}
}

// newKey returns the key Retrying sends req, which carries none, under.
// Under an idempotency scope it is the key Propagator derives (or its
// error, such as ErrNoStep): a random key there would be new on each run
// of the handler, and a run taken over or repeated would do the
// downstream work again. Elsewhere POST and PATCH get a random key, and
// other methods none. derived says the key is a derived one.
func newKey(req *http.Request) (key string, derived bool, err error) {
	if _, _, ok := ScopeFrom(req.Context()); ok {
		key, err = derivedKey(req)
		return key, key != "", err
	}
	if needsKey(req.Method) {
		return rand.Text(), false, nil
	}
	return "", false, nil
}

// wait returns how long to wait before retry number attempt (from 1): what
// the response's Retry-After asks for, or else a duration drawn uniformly
// from zero to BaseDelay*2^(attempt-1); either capped at MaxDelay.
func (r *Retrying) wait(attempt int, resp *http.Response) time.Duration {
	if resp != nil {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), r.now()); ok {
			return min(d, r.maxDelay)
		}
	}
	ceiling := r.maxDelay
	if shift := attempt - 1; shift < 62 && r.baseDelay <= r.maxDelay>>shift {
		ceiling = r.baseDelay << shift
	}
	return mathrand.N(ceiling + 1)
}

// retryable reports whether the outcome of one attempt is worth another.
func retryable(resp *http.Response, err error) bool {
	if err != nil {
		// Our own refusals do not change by resending, nor does a lease
		// that ended: Transport refuses every attempt under it.
		return !errors.Is(err, ErrNoScope) && !errors.Is(err, ErrNoStep) && !errors.Is(err, ErrBodyNotReplayable) &&
			!errors.Is(err, idem.ErrLeaseExpired) && !errors.Is(err, idem.ErrLeaseLost)
	}
	switch code := resp.StatusCode; {
	case code == http.StatusConflict, code == http.StatusTooManyRequests:
		return true
	case code == http.StatusNotImplemented, code == http.StatusHTTPVersionNotSupported:
		return false
	default:
		return code >= 500 && code <= 599
	}
}

func outcome(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

// unknownUnsettled reports whether resp says the request's outcome is
// unknown and gives no Retry-After: nothing will settle it by itself
// (the server has no reconciliation), so waiting to ask again is waiting
// for nothing. The policy of the idem servers: an outcome-unknown answer
// carries a retry hint only when a retry may find it settled.
func unknownUnsettled(resp *http.Response) bool {
	return unknownCode(resp) != "" && resp.Header.Get("Retry-After") == ""
}

// idempotentMethod reports whether RFC 9110 defines method as idempotent,
// so that resending it is safe without a key.
func idempotentMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// nextBody returns a fresh copy of req's body for a retry.
func nextBody(req *http.Request) (io.ReadCloser, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req.Body, nil
	}
	if req.GetBody == nil {
		return nil, ErrBodyNotReplayable
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("%w: GetBody: %w", ErrBodyNotReplayable, err)
	}
	return body, nil
}

// discardLimit bounds how much of a discarded response is read so that its
// connection can be reused; a longer body costs the connection instead.
const discardLimit = 64 << 10

// discard drains and closes the body of a response that is not returned.
func discard(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, discardLimit))
	resp.Body.Close()
}

// ErrOutcomeUnknown is matched (errors.Is) by an *OutcomeUnknownError. It
// is idem.ErrOutcomeUnknown: one value for "the outcome is unknown",
// whichever package says it.
var ErrOutcomeUnknown = idem.ErrOutcomeUnknown

// OutcomeUnknownError is returned by Retrying when its retries ended on an
// answer saying that the request's outcome is unknown (it may have taken
// effect, no result is known yet, and the server will not run it again),
// or on a network error after some attempt may have reached the server
// (Err). It did not fail: retry later with the same Key to get its result
// (once the server has reconciled it), or ask its operator; do not send it
// again under a new key unless running it twice is acceptable.
type OutcomeUnknownError struct {
	Method, URL string
	Key         string // the Idempotency-Key the request was sent with
	Status      int    // the last answer's status; 0 after a network error
	Code        string // the last answer's problem code
	Attempts    int
	Err         error // the last attempt's network error, when no answer came
}

// Error says that the outcome is unknown, never that the request failed.
func (e *OutcomeUnknownError) Error() string {
	last := fmt.Sprintf("%d %s", e.Status, e.Code)
	if e.Err != nil {
		last = e.Err.Error()
	}
	return fmt.Sprintf("idemclient: %s %s: outcome unknown after %d attempts (%s): the request may have taken effect; retry later with Idempotency-Key %q for its result",
		e.Method, e.URL, e.Attempts, last, e.Key)
}

// Unwrap returns the last network error, if any.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Is reports ErrOutcomeUnknown, which is idem.ErrOutcomeUnknown.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// problemLimit bounds how much of a problem response is read for its code.
const problemLimit = 16 << 10

// unknownCode returns the code of a response that says the request's
// outcome is unknown (a problem's code, or the idem_code of a Stripe-shaped
// error), or "". The body stays readable.
func unknownCode(resp *http.Response) string {
	if resp == nil || resp.StatusCode < 500 || resp.Body == nil {
		return ""
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") && !strings.HasPrefix(ct, "application/json") {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, problemLimit))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
	// A problem's code, or the idem_code of Stripe's error object, which
	// idem's servers write under --error-format stripe.
	var p struct {
		Code  string `json:"code"`
		Error struct {
			IdemCode string `json:"idem_code"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &p) != nil {
		return ""
	}
	for _, code := range []string{p.Code, p.Error.IdemCode} {
		switch code {
		case "outcome_unknown", "upstream_no_response", "upstream_timeout":
			return code
		}
	}
	return ""
}

// last returns the outcome of the last attempt: as it is, or pending (an
// attempt's outcome is unknown; lastUnknown: the last one's) unless the
// last attempt's answer settles it (settles).
func last(resp *http.Response, err error, pending *OutcomeUnknownError, lastUnknown bool) (*http.Response, error) {
	if pending != nil && (lastUnknown || err != nil || !settles(resp)) {
		if !lastUnknown && err == nil { // the answer that did not settle it: the caller may need to know (a 401)
			pending.Err = errors.Join(pending.Err, fmt.Errorf("the last attempt got %s", resp.Status))
		}
		discard(resp)
		return nil, pending
	}
	return resp, err
}

// settles says whether resp ends an earlier attempt's unknown outcome: a
// success, the server's answer to the request whichever attempt ran it,
// or a replay of the key's stored answer (Idempotent-Replayed). Any other
// answer may come from in front of the server (an expired token, a
// firewall, a load balancer's 503, an SSO proxy's 302 to its login page,
// which http.Client would follow with the key lost) and says nothing of
// the earlier attempt; one from the server itself comes back replayed on
// the next retry with the key.
func settles(resp *http.Response) bool {
	return resp.StatusCode >= 200 && resp.StatusCode < 300 || resp.Header.Get(HeaderReplayed) == "true"
}

// unknownError returns the *OutcomeUnknownError of an attempt whose
// outcome is unknown, or nil; resp stays readable. reached says whether
// this attempt or an earlier one may have reached the server.
func unknownError(out *http.Request, resp *http.Response, err error, attempts int, reached bool) *OutcomeUnknownError {
	if err != nil {
		// No answer: it may have run, and the caller needs the key to ask
		// for its result, unless every attempt provably never left. Then
		// the error stays as it is, Sent false.
		if key := keyOf(out.Header); key != "" && reached {
			return &OutcomeUnknownError{Method: out.Method, URL: out.URL.Redacted(), Key: key, Attempts: attempts, Err: err}
		}
		return nil
	}
	code := unknownCode(resp)
	if code == "" {
		return nil
	}
	return &OutcomeUnknownError{Method: out.Method, URL: out.URL.Redacted(), Key: keyOf(out.Header),
		Status: resp.StatusCode, Code: code, Attempts: attempts}
}

// stopped is the error of a RoundTrip that ends, for cause, before the
// answer of its retry (the caller's context ended, the body could not be
// had again, the wait was cut) after attempts of out: the unknown outcome
// pending, with cause; else, when an attempt may have reached the server,
// an unknown outcome with out's key, which the caller needs to ask for the
// result; else, nothing having been sent, cause with Sent false.
func stopped(out *http.Request, attempts int, pending *OutcomeUnknownError, reached bool, cause error) error {
	switch key := keyOf(out.Header); {
	case pending != nil:
		if pending.Err != nil {
			cause = fmt.Errorf("%w, after %w", cause, pending.Err)
		}
		pending.Err = cause
		return pending
	case !reached:
		return &sendError{err: cause}
	case key != "":
		return &OutcomeUnknownError{Method: out.Method, URL: out.URL.Redacted(), Key: key, Attempts: attempts, Err: cause}
	}
	return cause
}
