package idemhttp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/await"
	"github.com/idemkit/idem/internal/httpwire"
	"github.com/idemkit/idem/store"
)

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
	anonymous     bool // Options.AllowAnonymous
	fingerprint   func(*http.Request, []byte) string
	label         func(*http.Request) string // nil: none
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
	m := &middleware{e: e, methods: o.Methods, requireKey: o.RequireKey, tenant: o.Tenant, anonymous: o.AllowAnonymous, fingerprint: o.Fingerprint, label: o.Label,
		maxBody: o.MaxBody, maxBuffer: o.MaxResponseBuffer, wait: o.Wait, failOpen: o.FailOpen, policy: o.StatusPolicy,
		unknownAfter: o.UnknownRetryAfter, format: o.ErrorFormat, mismatch: o.MismatchStatus, durations: newRouteTimes(),
		lease: o.LeaseDuration, retention: o.Retention, log: o.Logger, onOutcome: o.OnOutcome,
		repeatability: o.Repeatability, keyRetention: o.KeyRetention}
	switch {
	case o.MaxBody < 0, o.MaxResponseBuffer < 0, o.Wait < 0, o.LeaseDuration < 0, o.Retention < 0, o.KeyRetention < 0, o.UnknownRetryAfter < 0:
		return nil, errors.New("idemhttp: New: negative MaxBody, MaxResponseBuffer, Wait, LeaseDuration, Retention or UnknownRetryAfter")
	case o.StatusPolicy != nil && o.StoreResult != nil:
		return nil, errors.New("idemhttp: New: set StatusPolicy or StoreResult, not both")
	case o.LeaseDuration > store.MaxDuration || o.Retention > store.MaxDuration || o.KeyRetention > store.MaxDuration:
		return nil, fmt.Errorf("idemhttp: New: LeaseDuration %v, Retention %v and KeyRetention %v must each be at most %v (store.MaxDuration)",
			o.LeaseDuration, o.Retention, o.KeyRetention, store.MaxDuration)
	case (o.LeaseDuration > 0 && o.LeaseDuration < time.Millisecond) || (o.Retention > 0 && o.Retention < time.Millisecond):
		return nil, fmt.Errorf("idemhttp: New: LeaseDuration %v or Retention %v is under the 1ms resolution of stores", o.LeaseDuration, o.Retention)
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
	m.methods = httpwire.WithHead(m.methods) // a HEAD runs the GET handler (Options.Methods)
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
	if m.log == nil {
		m.log = slog.Default()
	}
	for _, name := range httpwire.ReplayedByDefault {
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
// Authorization header values; none without a value that is not empty
// (an empty value is no credential: it must not become a scope shared by
// every client that sends it).
func credentialTenant(r *http.Request) (string, error) {
	vs := r.Header["Authorization"]
	if !slices.ContainsFunc(vs, func(v string) bool { return v != "" }) {
		return "", ErrTenantMissing
	}
	return httpwire.CredentialTenant(vs), nil
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
	if err == nil && tenant == "" {
		err = ErrTenantMissing
	}
	if err == nil {
		err = idem.ValidateTenant(tenant)
	}
	switch {
	case errors.Is(err, ErrTenantMissing) && m.anonymous:
		tenant = "" // the one scope of every anonymous client (AllowAnonymous)
	case errors.Is(err, ErrTenantMissing):
		m.reject(w, r, http.StatusBadRequest, CodeTenantMissing, err.Error()+
			" (send credentials, e.g. an Authorization header: keys are scoped by them)")
		return
	case err != nil:
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
	req := idem.Request{Tenant: tenant, Key: key, Fingerprint: m.fingerprint(r, body), LeaseDuration: m.lease, Retention: m.retention,
		KeyRetention: m.keyRetention}
	if m.label != nil {
		req.Label = m.label(r)
	}
	r.Body = httpwire.NewBody(body) // the gateway sends it on in one write (httpwire.Body)

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

// protects reports whether requests of method are protected, read
// without case: methods are case-sensitive on the wire, but Django,
// ASP.NET and handlers that compare with strings.EqualFold take "post"
// for POST, and a keyed request that passed unprotected would run again
// under its key. Protecting a distinct lower-case method is the safe side.
func (m *middleware) protects(method string) bool {
	for _, p := range m.methods {
		if strings.EqualFold(p, method) {
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
// lease ends, and is at least 1; it does not overflow.
func retryAfterSeconds(d time.Duration) int {
	secs := d / time.Second // divided first: adding a second to a huge d would overflow it to 1
	if d%time.Second != 0 {
		secs++
	}
	return max(1, int(secs))
}

// wakeWaiters tells this process's waiters for id (Options.Wait) that
// the key finished.
func (m *middleware) wakeWaiters(id store.ID) { m.finished.Wake(id) }
