package idemhttp

import (
	"log/slog"
	"net/http"
	"time"
)

// Options configures the middleware. A nil *Options means all defaults.
type Options struct {
	// Methods are the methods the middleware protects, read without case
	// (a request's "post" is protected as POST is: handlers and frameworks
	// that read methods without case would run it); other requests pass
	// through untouched. Nil means POST and PATCH. With GET they protect
	// HEAD too: ServeMux, Rails, Express, Spring and Django run the GET
	// handler for a HEAD. The default Fingerprint covers the method, so a
	// HEAD that reuses a GET's key is a mismatch (422), never a replay of
	// the GET's response.
	Methods []string
	// RequireKey answers a protected request without an Idempotency-Key
	// with 400 (code key_required). False lets it pass through unprotected.
	RequireKey bool
	// Tenant returns the scope of a request's keys: the same key from two
	// tenants never meets. Nil means the hex SHA-256 of the request's
	// Authorization header values, so one client's credentials can never
	// replay another client's response. Put the middleware after your
	// authentication. A request for which it returns "" or an error
	// wrapping ErrTenantMissing (no credentials) is answered 400 (code
	// tenant_missing), unless AllowAnonymous; any other error is answered
	// 400 (code tenant_invalid) with the error's text as the detail: say
	// what the client did wrong, nothing it may not see.
	Tenant func(r *http.Request) (string, error)
	// TenantHeader, when set, takes the tenant from this request header
	// instead, which must then be set exactly once by something you trust
	// (an authenticating proxy): a request without it gets 400. Empty means
	// Tenant decides. Setting both is an error.
	TenantHeader string
	// AllowAnonymous puts the requests that carry no tenant (no
	// Authorization header, or a Tenant that returns "" or
	// ErrTenantMissing) in one scope, "", shared by every anonymous
	// client: two of them sending the same key get one execution and the
	// same response. False answers them 400 (code tenant_missing), as
	// idemgrpc and idem serve do.
	AllowAnonymous bool
	// Fingerprint digests a request and its body; reusing a key with
	// another digest is answered 422 (code key_mismatch). Nil means the
	// package's Fingerprint function. An empty digest is a bug in the
	// function (every request would match every other): such a request is
	// answered 500 and its handler does not run.
	Fingerprint func(r *http.Request, body []byte) string
	// Label, when set, names what a request is in its key's record
	// (idem.Request.Label), for an operator who finds the key UNKNOWN: e.g.
	// "POST /v1/orders route=orders". It is shown to whoever may read the
	// key's record: never put a secret in it (a query string, a header's
	// value). Nil: no label.
	Label func(r *http.Request) string
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
	// (Content-Type, Content-Encoding, Location, Content-Language,
	// Content-Disposition, ETag). Set-Cookie, Authorization, WWW-Authenticate,
	// Proxy-Authenticate and hop-by-hop headers are refused. Nil means
	// none.
	ReplayHeaders []string
	// StatusPolicy decides from the final status what becomes of the key:
	// the response stored and replayed, the key released so that a retry
	// runs the handler again, or the key marked UNKNOWN. A handler's
	// SetDisposition overrides it for its request, and a downstream key in
	// flight passed on (idem's 409 key_in_flight, Stripe's 409
	// idempotency_key_in_use) is UNKNOWN before it is asked. Nil means
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
	// Reconcile, so only an operator's Resolve settles the key): set it
	// when your operators settle keys within so long. Zero means no
	// Retry-After, the same policy as idemgrpc's UnknownRetryAfter: a
	// client (idemclient.Retrying) then does not retry the key, since
	// nothing will change by itself.
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
