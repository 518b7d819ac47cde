package idemhttp

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/await"
	"github.com/idemkit/idem/internal/finalctx"
	"github.com/idemkit/idem/internal/httpwire"
	"github.com/idemkit/idem/store"
)

// Options configures the middleware. A nil *Options means all defaults.
type Options struct {
	// Methods are the methods the middleware protects; other requests pass
	// through untouched. Nil means POST and PATCH.
	Methods []string
	// RequireKey answers a protected request without an Idempotency-Key
	// with 400 (code key_required). False lets it pass through unprotected.
	RequireKey bool
	// Tenant returns the scope of a request's keys: the same key from two
	// tenants never meets. An error answers 400 (code tenant_invalid). Nil
	// means the hex SHA-256 of the request's Authorization header values,
	// so one client's credentials can never replay another client's
	// response, and "" (one shared scope) for requests without that
	// header. Put the middleware after your authentication. A Tenant
	// that returns ErrTenantMissing answers 400 (code tenant_missing).
	Tenant func(r *http.Request) (string, error)
	// TenantHeader, when set, takes the tenant from this request header
	// instead, which must then be set exactly once by something you trust
	// (an authenticating proxy): a request without it gets 400. Empty means
	// Tenant decides. Setting both is an error.
	TenantHeader string
	// Fingerprint digests a request and its body; reusing a key with
	// another digest is answered 422 (code key_mismatch). Nil means the
	// package's Fingerprint function. An empty digest is a bug in the
	// function (every request would match every other): such a request is
	// answered 500 and its handler does not run.
	Fingerprint func(r *http.Request, body []byte) string
	// MaxBody bounds the request body, which is read whole to fingerprint
	// it; a larger body is answered 413 (code body_too_large) before any
	// key is taken. Zero means 1 MiB.
	MaxBody int64
	// MaxResponseBuffer bounds the response kept for replay. A response
	// that grows past it streams on to the client, and the key records it
	// as not replayable (see the package documentation). Zero means 1 MiB.
	MaxResponseBuffer int
	// Wait is how long a request waits for another in-flight request with
	// the same key to finish, then replays its result. Zero answers 409
	// (code key_in_flight) at once, with Retry-After.
	Wait time.Duration
	// FailOpen runs the handler unprotected when the store fails at the
	// start of a request. False answers 503 (code store_unavailable) and
	// does not run the handler: fail closed.
	FailOpen bool
	// ReplayHeaders adds response headers to the ones a replay carries
	// (Content-Type, Location, Content-Language, Content-Disposition,
	// ETag). Set-Cookie, Authorization, WWW-Authenticate,
	// Proxy-Authenticate and hop-by-hop headers are refused. Nil means
	// none.
	ReplayHeaders []string
	// StatusPolicy decides from the final status what becomes of the key:
	// the response stored and replayed, the key released so that a retry
	// runs the handler again, or the key marked UNKNOWN. A handler's
	// SetDisposition overrides it for its request. Nil means
	// DefaultStatusPolicy.
	StatusPolicy func(status int) Disposition
	// StoreResult is the storing policy of earlier versions: true stores
	// the result, false releases the key (DefaultStoreResult releases on
	// every 5xx, 408, 425 and 429). Set StatusPolicy or StoreResult, not
	// both; nil means StatusPolicy decides.
	//
	// Deprecated: Use StatusPolicy, which can also mark a key UNKNOWN: a
	// StoreResult that releases the key of a 500 or 504 that came after a
	// side effect lets the retry run it twice.
	StoreResult func(status int) bool
	// UnknownRetryAfter is the Retry-After of the 503 outcome_unknown
	// answered for an UNKNOWN key when the engine gives none (it has no
	// Reconcile). Zero means DefaultUnknownRetryAfter.
	UnknownRetryAfter time.Duration
	// LeaseDuration and Retention override the engine's for these routes. Zero
	// means the engine's.
	LeaseDuration time.Duration
	Retention     time.Duration
	// KeyRetention overrides the engine's Options.KeyRetention for these
	// routes: how long, from completion, a key is remembered after its
	// response is dropped; a retry in between gets 410 (code key_expired)
	// and does not run. Zero means the engine's.
	KeyRetention time.Duration
	// Logger receives a line for every store failure and fail-open. Nil
	// means slog.Default().
	Logger *slog.Logger
	// ErrorFormat is the shape of the error answers: problem+json (the
	// zero value) or Stripe's error object (ErrorFormatStripe).
	ErrorFormat ErrorFormat
	// MismatchStatus is the status of a key_mismatch answer. Zero means
	// the format's: 422 for problem, 400 for stripe.
	MismatchStatus int
	// Repeatability understands OASIS Repeatable Requests (the Azure REST
	// API guidelines): a Repeatability-Request-ID is a key, as an
	// Idempotency-Key is; it needs a Repeatability-First-Sent, and a
	// request first sent longer ago than keys are kept gets 412 (code
	// first_sent_stale) without running; answers carry
	// Repeatability-Result. False ignores those headers.
	Repeatability bool
	// OnOutcome, when set, is called once per request with what the
	// middleware did, for metrics. It runs on the request's goroutine
	// and must be fast.
	OnOutcome func(r *http.Request, o Outcome)
}

// DefaultStoreResult is the storing policy of earlier versions, for
// Options.StoreResult: results with a status that invites the client to
// retry (5xx, 408 Request Timeout, 425 Too Early, 429 Too Many Requests)
// are not stored, so the retry runs the handler again; every other result
// is stored and replayed. A 500 or 504 that came after a side effect then
// runs it twice: DefaultStatusPolicy is the safer default.
func DefaultStoreResult(status int) bool {
	switch {
	case status >= 500, status == http.StatusRequestTimeout, status == http.StatusTooEarly,
		status == http.StatusTooManyRequests:
		return false
	}
	return true
}

// defaultReplayHeaders are the response headers every replay carries.
var defaultReplayHeaders = []string{"Content-Type", "Location", "Content-Language", "Content-Disposition", "ETag"}

// forbiddenReplayHeaders belong to one response or one connection and
// are never replayed to another request.
var forbiddenReplayHeaders = map[string]bool{
	"Set-Cookie": true, "Authorization": true, "Www-Authenticate": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Connection": true, "Keep-Alive": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Proxy-Connection": true, "Content-Length": true,
	HeaderReplayed: true, notReplayableHeader: true,
}

// notReplayableHeader marks a stored result whose response cannot be
// replayed; its value says why. It is never sent to a client.
const notReplayableHeader = "Idem-Not-Replayable"

// New returns the middleware that gives the handlers it wraps the
// Idempotency-Key protocol on engine e. Wrap a route or a sub-router with
// a middleware of its own to give it other options. Bad options are an
// error.
func New(e *idem.Engine, o *Options) (func(http.Handler) http.Handler, error) {
	m, err := newMiddleware(e, o)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(next, w, r) })
	}, nil
}

type middleware struct {
	e             *idem.Engine
	methods       []string
	requireKey    bool
	tenant        func(*http.Request) (string, error)
	fingerprint   func(*http.Request, []byte) string
	maxBody       int64
	maxBuffer     int
	wait          time.Duration
	failOpen      bool
	replayHeaders []string // canonical names
	policy        func(int) Disposition
	unknownAfter  time.Duration
	lease         time.Duration
	retention     time.Duration
	keyRetention  time.Duration
	log           *slog.Logger
	onOutcome     func(*http.Request, Outcome)
	fullLog       logEvery // the store_full warning
	format        ErrorFormat
	mismatch      int         // the status of key_mismatch
	durations     *routeTimes // recent execution times, for Retry-After
	expiry        []string    // the value of HeaderExpiry
	tracked       time.Duration
	repeatability bool

	// finished wakes requests waiting (Options.Wait) for a key that a
	// request of this middleware holds, as soon as it is finalized; waiters
	// also poll the store, which covers keys held by other processes.
	finished *await.Waiters // nil without Options.Wait
}

func newMiddleware(e *idem.Engine, opts *Options) (*middleware, error) {
	if e == nil {
		return nil, errors.New("idemhttp: New: nil engine")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	m := &middleware{e: e, methods: o.Methods, requireKey: o.RequireKey, tenant: o.Tenant, fingerprint: o.Fingerprint,
		maxBody: o.MaxBody, maxBuffer: o.MaxResponseBuffer, wait: o.Wait, failOpen: o.FailOpen, policy: o.StatusPolicy,
		unknownAfter: o.UnknownRetryAfter, format: o.ErrorFormat, mismatch: o.MismatchStatus, durations: newRouteTimes(),
		lease: o.LeaseDuration, retention: o.Retention, log: o.Logger, onOutcome: o.OnOutcome,
		repeatability: o.Repeatability, keyRetention: o.KeyRetention}
	switch {
	case o.MaxBody < 0, o.MaxResponseBuffer < 0, o.Wait < 0, o.LeaseDuration < 0, o.Retention < 0, o.KeyRetention < 0, o.UnknownRetryAfter < 0:
		return nil, errors.New("idemhttp: New: negative MaxBody, MaxResponseBuffer, Wait, LeaseDuration, Retention or UnknownRetryAfter")
	case o.StatusPolicy != nil && o.StoreResult != nil:
		return nil, errors.New("idemhttp: New: set StatusPolicy or StoreResult, not both")
	case o.LeaseDuration > 0 && o.LeaseDuration < time.Millisecond:
		return nil, fmt.Errorf("idemhttp: New: LeaseDuration %v is under the 1ms resolution of stores", o.LeaseDuration)
	case o.ErrorFormat > ErrorFormatStripe:
		return nil, fmt.Errorf("idemhttp: New: unknown %v", o.ErrorFormat)
	case o.MismatchStatus != 0 && (o.MismatchStatus < 400 || o.MismatchStatus > 499):
		return nil, fmt.Errorf("idemhttp: New: MismatchStatus %d is not a 4xx status", o.MismatchStatus)
	case o.Tenant != nil && o.TenantHeader != "":
		return nil, errors.New("idemhttp: New: set Tenant or TenantHeader, not both")
	}
	retention := cmp.Or(m.retention, e.Retention())
	keyRetention := cmp.Or(m.keyRetention, e.KeyRetention())
	m.expiry = []string{expiryValue(retention, keyRetention)}
	m.tracked = max(retention, keyRetention) // how long a key is remembered
	if m.mismatch == 0 {
		m.mismatch = m.format.MismatchStatus()
	}
	if m.methods == nil {
		m.methods = []string{http.MethodPost, http.MethodPatch}
	}
	for _, method := range m.methods {
		if !httpwire.ValidToken(method) {
			return nil, fmt.Errorf("idemhttp: New: invalid method %q", method)
		}
	}
	if o.TenantHeader != "" {
		if !httpwire.ValidToken(o.TenantHeader) {
			return nil, fmt.Errorf("idemhttp: New: invalid TenantHeader %q", o.TenantHeader)
		}
		m.tenant = headerTenant(http.CanonicalHeaderKey(o.TenantHeader))
	}
	if m.tenant == nil {
		m.tenant = credentialTenant
	}
	if m.fingerprint == nil {
		m.fingerprint = Fingerprint
	}
	if m.maxBody == 0 {
		m.maxBody = 1 << 20
	}
	if m.maxBuffer == 0 {
		m.maxBuffer = 1 << 20
	}
	if o.StoreResult != nil {
		m.policy = storeResultPolicy(o.StoreResult)
	}
	if m.policy == nil {
		m.policy = DefaultStatusPolicy
	}
	if m.unknownAfter == 0 {
		m.unknownAfter = DefaultUnknownRetryAfter
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	for _, name := range defaultReplayHeaders {
		m.replayHeaders = append(m.replayHeaders, http.CanonicalHeaderKey(name))
	}
	for _, name := range o.ReplayHeaders {
		c := http.CanonicalHeaderKey(name)
		if !httpwire.ValidToken(name) || forbiddenReplayHeaders[c] {
			return nil, fmt.Errorf("idemhttp: New: header %q may not be replayed", name)
		}
		m.replayHeaders = append(m.replayHeaders, c)
	}
	if m.wait > 0 {
		m.finished = &await.Waiters{}
	}
	return m, nil
}

// credentialTenant is the default tenant: the hex SHA-256 of the
// Authorization header values, "" without them.
func credentialTenant(r *http.Request) (string, error) {
	return httpwire.CredentialTenant(r.Header["Authorization"]), nil
}

func headerTenant(name string) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		vs := r.Header[name]
		if len(vs) != 1 {
			return "", fmt.Errorf("header %s must be sent once, it was sent %d times", name, len(vs))
		}
		return vs[0], nil
	}
}

// leaseContext is the context a protected handler runs under: the lease's,
// which carries the lease for idem.LeaseFromContext, with the request's
// override for SetDisposition. It is context.WithValue without an
// allocation of its own (it lives in the request's exchange).
type leaseContext struct {
	context.Context
	override *override
}

func (c *leaseContext) Value(key any) any {
	if _, ok := key.(dispositionKey); ok {
		return c.override
	}
	return c.Context.Value(key)
}

func (m *middleware) report(r *http.Request, o Outcome) {
	if m.onOutcome != nil {
		m.onOutcome(r, o)
	}
}

// writeError answers with code in the configured format.
func (m *middleware) writeError(w http.ResponseWriter, status int, code, detail string) {
	m.format.WriteError(w, status, code, detail)
}

func (m *middleware) reject(w http.ResponseWriter, r *http.Request, status int, code, detail string) {
	m.writeError(w, status, code, detail)
	m.report(r, OutcomeRejected)
}

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	if !m.protects(r.Method) {
		next.ServeHTTP(w, r)
		m.report(r, OutcomePassed)
		return
	}
	key, rp, err := m.keyOf(r)
	switch {
	case errors.Is(err, ErrNoKey) && !m.requireKey:
		next.ServeHTTP(w, r)
		m.report(r, OutcomePassed)
		return
	case errors.Is(err, ErrNoKey):
		m.reject(w, r, http.StatusBadRequest, CodeKeyRequired, "this endpoint requires an Idempotency-Key header")
		return
	case err != nil:
		m.reject(w, r, http.StatusBadRequest, CodeKeyInvalid, err.Error())
		return
	}
	tenant, err := m.tenant(r)
	if err == nil {
		err = idem.ValidateTenant(tenant)
	}
	if errors.Is(err, ErrTenantMissing) {
		m.reject(w, r, http.StatusBadRequest, CodeTenantMissing, err.Error())
		return
	}
	if err != nil {
		m.reject(w, r, http.StatusBadRequest, CodeTenantInvalid, err.Error())
		return
	}
	// Every answer to a keyed request publishes the expiry policy (set
	// before the handler runs: a proxied upstream's own value is added to it).
	w.Header()[HeaderExpiry] = m.expiry
	if rp.stale(m.tracked) {
		rp.mark(w, "rejected")
		m.reject(w, r, http.StatusPreconditionFailed, CodeFirstSentStale, "the request was first sent ("+
			rp.firstSent.UTC().Format(http.TimeFormat)+") longer ago than this server keeps keys ("+m.tracked.String()+
			"): an earlier send may have run and been forgotten; it is not run")
		return
	}
	body, ok := m.readBody(w, r)
	if !ok {
		return
	}
	req := idem.Key{Tenant: tenant, Key: key, Fingerprint: m.fingerprint(r, body), LeaseDuration: m.lease, Retention: m.retention,
		KeyRetention: m.keyRetention}
	r.Body = newBodyReader(body)

	// The work is detached from the client's cancellation: once it has
	// started it runs to completion and is recorded, so that the client's
	// retry gets the replay rather than a second execution.
	ctx := context.WithoutCancel(r.Context())
	att, err := m.e.Begin(ctx, req)
	if err == nil && att.Outcome == idem.InFlight && m.wait > 0 {
		att, err = m.finished.Turn(ctx, r.Context().Done(), m.e, req, att, m.wait)
	}
	if err != nil {
		m.beginFailed(next, w, r, err)
		return
	}
	switch att.Outcome {
	case idem.Acquired:
		rp.mark(w, "accepted")
		m.execute(ctx, next, w, r, att.Lease)
	case idem.Replayed:
		if reason := att.Result.Header.Get(notReplayableHeader); reason != "" {
			m.writeError(w, http.StatusUnprocessableEntity, CodeNotReplayable,
				"the request with this key was processed, but its response ("+reason+") cannot be replayed; it will not run again")
			m.report(r, OutcomeNotReplayable)
			return
		}
		rp.mark(w, "accepted")
		m.replay(w, r, att.Result)
		m.report(r, OutcomeReplayed)
	case idem.InFlight:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(m.inFlightRetryAfter(r, att))))
		m.writeError(w, http.StatusConflict, CodeKeyInFlight, "a request with this key is being processed; retry after Retry-After")
		m.report(r, OutcomeConflict)
	case idem.Mismatch:
		rp.mark(w, "rejected")
		m.writeError(w, m.mismatch, CodeKeyMismatch, "this key was used for a request with a different method, path, query, content type or body")
		m.report(r, OutcomeMismatch)
	case idem.Unknown:
		m.answerUnknown(w, r, att)
	case idem.Expired:
		rp.mark(w, "rejected")
		m.answerExpired(w, att.Record)
		m.report(r, OutcomeExpired)
	}
}

func (m *middleware) protects(method string) bool {
	for _, p := range m.methods {
		if p == method {
			return true
		}
	}
	return false
}

// readBody reads the whole request body, up to MaxBody, answering the
// request itself when it cannot.
func (m *middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	tooLarge := func() ([]byte, bool) {
		m.reject(w, r, http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
			"the request body is over the limit of "+strconv.FormatInt(m.maxBody, 10)+" bytes")
		return nil, false
	}
	if r.ContentLength > m.maxBody {
		return tooLarge()
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, m.maxBody), r.ContentLength)
	if _, over := errors.AsType[*http.MaxBytesError](err); over {
		return tooLarge()
	}
	if err != nil {
		m.reject(w, r, http.StatusBadRequest, CodeBodyUnreadable, "reading the request body: "+err.Error())
		return nil, false
	}
	return body, true
}

// bodyReader hands the body that was read to fingerprint it on to the
// handler: io.NopCloser(bytes.NewReader(body)) in one allocation.
type bodyReader struct{ bytes.Reader }

func newBodyReader(body []byte) *bodyReader {
	b := new(bodyReader)
	b.Reset(body)
	return b
}

// Close does nothing: the server closes the request's own body.
func (*bodyReader) Close() error { return nil }

func (m *middleware) beginFailed(next http.Handler, w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, idem.ErrInvalidKey):
		m.reject(w, r, http.StatusBadRequest, CodeKeyInvalid, err.Error())
	case errors.Is(err, idem.ErrInvalidTenant):
		m.reject(w, r, http.StatusBadRequest, CodeTenantInvalid, err.Error())
	case errors.Is(err, idem.ErrInvalidFingerprint), errors.Is(err, idem.ErrInvalidRequest): // an unusable or empty fingerprint
		m.log.Error("idemhttp: the Fingerprint function returned an unusable fingerprint", "err", err)
		m.writeError(w, http.StatusInternalServerError, CodeInternal, "the server's request fingerprint is misconfigured")
		m.report(r, OutcomeStoreError)
	case errors.Is(err, store.ErrStoreFull):
		m.storeFull(w, r, err)
	case m.failOpen:
		m.log.Warn("idemhttp: store failed; running the handler unprotected (FailOpen)", "method", r.Method, "path", r.URL.Path, "err", err)
		next.ServeHTTP(w, r)
		m.report(r, OutcomeFailedOpen)
	default:
		m.log.Error("idemhttp: store failed; answering 503", "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "1")
		m.writeError(w, http.StatusServiceUnavailable, CodeStoreUnavailable, "the idempotency store is unavailable; the request was not processed")
		m.report(r, OutcomeStoreError)
	}
}

// retryAfterSeconds rounds up, so a client never comes back before the
// lease ends, and is at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// wakeWaiters tells this process's waiters for id (Options.Wait) that
// the key finished.
func (m *middleware) wakeWaiters(id store.ID) { m.finished.Wake(id) }

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
	finished := false
	defer func() {
		if finished {
			return
		}
		// The handler panicked (or called runtime.Goexit); the panic goes
		// on. It may have come after a side effect (a reverse proxy aborts
		// a broken upstream body so): the key turns UNKNOWN, never runs again.
		ctx := x.finalizeContext(detached)
		defer ctx.Cancel()
		m.finalizeErr(r, l.MarkUnknown(ctx, "the handler panicked"), OutcomeMarkedUnknown)
		c.release()
		m.wakeWaiters(id)
	}()
	x.handlerCtx = leaseContext{Context: l.Context(), override: &x.override}
	start := time.Now()
	next.ServeHTTP(c, r.WithContext(&x.handlerCtx))
	finished = true
	m.durations.add(routeOf(r), time.Since(start))
	ctx := x.finalizeContext(detached)
	defer ctx.Cancel()
	m.finalize(ctx, r, l, c, &x.override)
	c.release()
	m.wakeWaiters(id)
}

// exchange is what a protected request needs beyond the Request itself,
// in one allocation. It is not pooled: the handler's context and the
// finalize context may be kept by code the request called.
type exchange struct {
	capture    capture
	handlerCtx leaseContext // the handler's context
	override   override     // what the handler declared with SetDisposition
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
// as the status policy says.
func (m *middleware) finalize(ctx context.Context, r *http.Request, l *idem.Lease, c *capture, o *override) {
	status := c.finalStatus()
	d, reason := o.get()
	if d == 0 {
		d, reason = m.policy(status), "status "+strconv.Itoa(status)
	}
	switch {
	case d == DispositionUnknown:
		m.finalizeErr(r, l.MarkUnknown(ctx, reason), OutcomeMarkedUnknown)
	case d == DispositionRelease:
		m.finalizeErr(r, l.Release(ctx), OutcomeReleased)
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
