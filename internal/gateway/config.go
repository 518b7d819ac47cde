package gateway

import (
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
	"go.opentelemetry.io/otel/trace"
)

// Config is everything `idem serve` is told. Zero values mean the defaults
// of the flags in cmd/idem.
type Config struct {
	Listen          string        // the proxy's address
	Upstream        *url.URL      // required
	Store           store.Store   // required: see OpenStore
	StoreTimeout    time.Duration // bound of every store call (idem.Options.StoreTimeout); zero: 2s
	Lease           time.Duration // zero: 30s
	Retention       time.Duration // zero: 24h
	Methods         []string      // nil: POST and PATCH
	RequireKey      bool
	TenantHeader    string        // an alias of TenantFrom "header:NAME"; setting both is an error
	TenantFrom      []string      // nil: authorization (and header:Stripe-Account under ErrorFormatStripe); see TenantSourcesHelp
	AllowAnonymous  bool          // requests without tenant credentials share one tenant instead of 400 tenant_missing
	MaxBody         int64         // zero: idemhttp's default
	MaxResponse     int           // the replay buffer; zero: idemhttp's default (1 MiB)
	Wait            time.Duration // zero: answer 409 at once
	FailOpen        bool
	UpstreamTimeout time.Duration // zero: 30s
	Admin           string        // the admin API's address; empty: no admin API
	AdminToken      string        // empty: the key API is open to whoever reaches Admin (loopback only, see AdminInsecure)
	AdminInsecure   bool          // allow Admin on a non-loopback address without AdminToken
	// AdminTokensFile names a file of admin tokens, one "name role token"
	// a line (role read-only or read-write), re-read on Reload; with
	// AdminToken (read-write, named "admin-token") they are the tokens
	// the admin API takes (adminaccess.go).
	AdminTokensFile string
	// AdminHosts are the names, besides the admin address and loopback,
	// that a request to the admin API may carry in Host and Origin
	// ("name" on any port, or "name:port"; adminguard.go).
	AdminHosts []string
	// TLSCert and TLSKey are PEM files of the proxy's certificate (its
	// chain) and key: the proxy then speaks TLS (1.2 at least, HTTP/1.1).
	// AdminTLSCert and AdminTLSKey are the admin API's. Both pairs are
	// read again on Reload; a pair that does not load keeps the running
	// one and fails the reload.
	TLSCert, TLSKey           string
	AdminTLSCert, AdminTLSKey string
	// AdminClientCA is a PEM file of the CAs whose client certificates
	// the admin API requires (mTLS; needs AdminTLSCert), read again on
	// Reload. It authenticates: without a token, every caller with such a
	// certificate is read-write, named in the audit by its subject
	// ("cert:CN=..."), and the admin API may listen beyond loopback; with
	// tokens, a call needs both, and the audit names the token.
	AdminClientCA   string
	ReadTimeout     time.Duration // zero: DefaultReadTimeout
	IdleTimeout     time.Duration // zero: DefaultIdleTimeout
	MaxConns        int           // zero: DefaultMaxConns()
	ShutdownTimeout time.Duration // zero: 30s
	// DrainDelay is how long, on shutdown, /readyz answers 503 before the
	// proxy stops accepting: the time a load balancer needs to see it and
	// send new requests elsewhere. Zero: the proxy stops at once (still
	// after /readyz fails).
	DrainDelay time.Duration
	// AdminListener, when not nil, is the admin API's listener, bound at
	// Admin already (idem serve binds it before the store answers, to
	// answer /healthz meanwhile); Run serves on it and closes it.
	AdminListener net.Listener
	// Takeover is what a request does with a key whose previous attempt's
	// lease ended (the gateway crashed or stalled): idem.TakeoverUnknown
	// (the zero value: reconcile, else UNKNOWN) or idem.TakeoverRun (send
	// it again, with Idempotency-Previous-Fence).
	Takeover idem.TakeoverPolicy
	// ReconcileURL, when set, is the upstream's lookup of a request by its
	// key (docs/reconcile.md): a URL template with {key}, and optionally
	// {tenant} and {fence}. Empty: UNKNOWN keys stay so until resolved.
	ReconcileURL     string
	ReconcileToken   string        // the bearer token sent to ReconcileURL; empty: none
	ReconcileTimeout time.Duration // zero: 5s
	ReconcileEvery   time.Duration // the interval of the background sweep of UNKNOWN keys; zero: no sweep
	// ReconcileRate and ReconcileConcurrency bound the sweep's lookups:
	// started per second, and in flight at once; zero: idem's defaults
	// (idem.DefaultReconcileRate, idem.DefaultReconcileConcurrency).
	ReconcileRate        float64
	ReconcileConcurrency int
	// StatsEvery is the interval of the samples of the gateway's counters
	// that the admin API keeps for the console's overview (the last 360);
	// zero: 10s, an hour of them.
	StatsEvery time.Duration
	// ErrorFormat is the shape of error answers to proxied requests
	// (problem+json, or Stripe's error object); the admin API always
	// answers problem+json. The stripe format also brings Stripe's rules
	// (stripe.go): an upstream 400 releases the key, and Stripe-Account
	// is part of the default tenant.
	ErrorFormat idemhttp.ErrorFormat
	// MismatchStatus is the status of key_mismatch; zero: the format's
	// (422 problem, 400 stripe).
	MismatchStatus int
	// ReplayHeaders are the upstream response headers a replay carries on
	// top of idemhttp's own; nil: DefaultReplayHeaders. Set-Cookie,
	// Authorization and hop-by-hop headers are refused.
	ReplayHeaders []string
	// Repeatability understands OASIS Repeatable Requests
	// (idemhttp.Options.Repeatability): Repeatability-Request-ID as a key.
	Repeatability bool
	// KeyRetention is how long, from completion, a key is remembered
	// after its response's Retention: a retry in between gets 410
	// key_expired and is not sent (idem.Options.KeyRetention). Zero: the
	// key ends with its response.
	KeyRetention time.Duration
	// Routes are the policies of the requests their patterns match (the
	// config file's routes); a request no route matches gets the
	// settings above. Nil: every request gets them.
	Routes []Route
	// AccessLog writes one line per proxied request ("idem: request", at
	// info; warn for store_error, lease_lost, failed_open) with its
	// route, status, outcome, hashed tenant and key, fence and the
	// durations of its upstream and store calls, instead of the line per
	// key event.
	AccessLog bool
	// EffectiveConfig is the effective configuration as idem serve
	// resolved it: --check-config=json's JSON document, each setting with
	// its source, secrets masked. The gateway does not read it: GET
	// /v1/config serves it as given at start or by the last Reload. Nil:
	// /v1/config answers 404.
	EffectiveConfig []byte
	// AdaptProcs runs the process on one P (GOMAXPROCS=1) while the
	// proxied requests do not overlap, and on the runtime's default once
	// they do (procs.go); idem serve's default unless GOMAXPROCS is set.
	// It changes the process's GOMAXPROCS: one gateway in a process.
	AdaptProcs bool
	Logger     *slog.Logger // nil: slog.Default()
	Tracer     trace.Tracer // nil: no traces
	// Transport sends requests upstream; nil: NewUpstreamTransport. The
	// gateway learns whether a failed request reached the upstream from
	// an *http.Transport's httptrace hooks; any other RoundTripper is
	// taken to have sent every request it failed (the key turns UNKNOWN,
	// never released on a guess).
	Transport http.RoundTripper
}

// DefaultReplayHeaders are the upstream response headers a replay carries
// by default, besides Content-Type, Content-Encoding, Location,
// Content-Language, Content-Disposition and ETag: the request ids that
// client SDKs and logs read back (Stripe's SDKs read Request-Id) and the
// API version.
var DefaultReplayHeaders = []string{"Request-Id", "X-Request-Id", "X-Correlation-Id", "Stripe-Version",
	"Idempotency-Key", "Original-Request"}
