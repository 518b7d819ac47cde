// Package probe tests whether an HTTP API honours Idempotency-Key as the
// IETF draft (draft-ietf-httpapi-idempotency-key-header) and Stripe do. Run
// sends a bounded number of requests, built from one sample request, and
// reports one Finding per check: sequential retries replay, a concurrent
// burst executes once, a different payload under a used key is refused, a
// missing or over-long key is refused, a retry after a forced client
// disconnect converges, and the same key under two credentials never
// replays across them; and what client SDKs rely on: a replay carries the
// original request id and echoes the key, a 409's Retry-After is about
// the time the request takes (not the whole lease), and a form body with
// its parameters in another order replays. It is the engine of the `idem
// probe` command.
//
// A run sends at most Burst+38 requests (Burst is capped at 64), each
// bounded by RequestTimeout, the whole run by Timeout. It never follows a
// redirect and refuses a target off loopback unless AllowRemote is set.
package probe

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/ctxtime"
	"github.com/idemkit/idem/internal/redact"
)

var (
	// ErrRemoteTarget is returned by Run for a target that is not on the
	// loopback interface when Config.AllowRemote is false.
	ErrRemoteTarget = errors.New("probe: target is not on loopback (set AllowRemote if you own it)")
	// ErrInvalidConfig is returned by Run for a Config it cannot use.
	ErrInvalidConfig = errors.New("probe: invalid config")
)

// Config is what to probe and how. Only URL is required.
type Config struct {
	// URL is the endpoint that claims to honour Idempotency-Key: http or
	// https, on loopback unless AllowRemote is set.
	URL string
	// Method of the sample request. Empty means POST.
	Method string
	// Body of the sample request. Nil means none.
	Body []byte
	// AltBody is a payload different from Body, for the same-key,
	// different-payload check. Nil means Body with a field
	// "idem_probe_variant" added when Body is a JSON object, or with
	// "&idem_probe_variant=1" (form) or "\n" appended otherwise.
	AltBody []byte
	// Header is sent with every request (Content-Type, Authorization...).
	// Nil means none.
	Header http.Header
	// Credentials are two values of CredentialHeader under which the API
	// scopes keys to two different clients, for the tenant-isolation check.
	// If either is empty, that check is skipped.
	Credentials [2]string
	// CredentialHeader names the header that carries Credentials. Empty
	// means Authorization.
	CredentialHeader string
	// Burst is how many same-key requests are sent at once. Zero means 8;
	// it is capped at 64.
	Burst int
	// Timeout bounds the whole run. Zero means 60s.
	Timeout time.Duration
	// RequestTimeout bounds each request. Zero means 10s.
	RequestTimeout time.Duration
	// AllowRemote lets Run probe a target that is not on loopback. Set it
	// only for a target you own: the probe executes the sample request
	// several times.
	AllowRemote bool
	// Sleep waits for d before a retry after a 409, or returns ctx's error.
	// Nil means a timer. Waits are capped at one second.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Verdict is the outcome of one check.
type Verdict uint8

const (
	Pass    Verdict = iota + 1 // the server behaves as the references ask
	Fail                       // a violation: a double execution, a cross-tenant replay, a wrong status
	Note                       // allowed behaviour worth knowing, such as an optional key
	Skipped                    // the check could not run (no credentials, a failing sample request)
)

// String names the verdict.
func (v Verdict) String() string {
	switch v {
	case Pass:
		return "PASS"
	case Fail:
		return "FAIL"
	case Note:
		return "NOTE"
	case Skipped:
		return "SKIP"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Finding is the result of one check.
type Finding struct {
	// Check is the check's stable name, such as "concurrent-burst".
	Check string
	// Verdict is the outcome.
	Verdict Verdict
	// Expected is what the IETF draft and Stripe ask for.
	Expected string
	// Observed is what the server did: statuses, replay markers,
	// Retry-After.
	Observed string
}

// Report is the result of a Run.
type Report struct {
	// Target is the probed URL.
	Target string
	// Findings holds one Finding per check, in the order they ran.
	Findings []Finding
	// Requests is how many requests were sent.
	Requests int
}

// Failed reports whether any finding is a Fail.
func (r Report) Failed() bool {
	for _, f := range r.Findings {
		if f.Verdict == Fail {
			return true
		}
	}
	return false
}

// Finding returns the finding of the named check, if it ran.
func (r Report) Finding(check string) (Finding, bool) {
	for _, f := range r.Findings {
		if f.Check == check {
			return f, true
		}
	}
	return Finding{}, false
}

// WriteText writes the report as one line per finding, for a terminal.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "idem probe %s (%d requests)\n", r.Target, r.Requests)
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "%s  %-20s %s\n      expected: %s\n", f.Verdict, f.Check, f.Observed, f.Expected)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Names of the checks, in the order Run runs them.
const (
	CheckSample     = "sample-request"
	CheckSequential = "sequential-retries"
	CheckBurst      = "concurrent-burst"
	CheckMismatch   = "payload-mismatch"
	CheckMissingKey = "missing-key"
	CheckLongKey    = "over-long-key"
	CheckDisconnect = "disconnect-retry"
	CheckTenant     = "tenant-isolation"
	// Issue 14: what clients such as Stripe's SDKs rely on.
	CheckReplayHeaders = "replay-headers"
	CheckRetryAfter    = "retry-after"
	CheckFormOrder     = "form-body-order"
)

const (
	maxBurst     = 64
	maxBodyBytes = 1 << 20
	maxWait      = time.Second
	// longKeyLength exceeds Stripe's 255-character limit.
	longKeyLength = 300
)

// Run probes the target described by cfg. It returns an error only for a
// config it cannot use or a refused target; what the server does wrong is
// in the Report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	p, err := newProber(cfg)
	if err != nil {
		return Report{}, err
	}
	defer p.transport.CloseIdleConnections()
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return p.run(ctx), nil
}

func newProber(cfg Config) (*prober, error) {
	u, err := url.Parse(cfg.URL)
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err // without the URL, which may hold a password
	}
	if err != nil {
		return nil, fmt.Errorf("%w: URL: %w", ErrInvalidConfig, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: URL scheme %q, want http or https", ErrInvalidConfig, u.Scheme)
	}
	if !cfg.AllowRemote && !isLoopback(u.Hostname()) {
		return nil, fmt.Errorf("%w: %s", ErrRemoteTarget, u.Host)
	}
	if cfg.Burst < 0 || cfg.Timeout < 0 || cfg.RequestTimeout < 0 {
		return nil, fmt.Errorf("%w: Burst, Timeout and RequestTimeout must not be negative", ErrInvalidConfig)
	}
	p := &prober{cfg: cfg, target: redact.URL(u.String())} // the report never shows a password
	if p.cfg.Method == "" {
		p.cfg.Method = http.MethodPost
	}
	if p.cfg.AltBody == nil {
		p.cfg.AltBody = variant(cfg.Body, cfg.Header.Get("Content-Type"))
	}
	if p.cfg.CredentialHeader == "" {
		p.cfg.CredentialHeader = "Authorization"
	}
	p.cfg.Burst = min(cmp.Or(cfg.Burst, 8), maxBurst)
	p.cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, 10*time.Second)
	if p.cfg.Sleep == nil {
		p.cfg.Sleep = ctxtime.Sleep
	}
	p.transport = &http.Transport{
		Proxy:               nil, // a proxy would make the loopback check meaningless
		MaxIdleConnsPerHost: maxBurst,
		TLSHandshakeTimeout: p.cfg.RequestTimeout,
	}
	p.client = &http.Client{
		Transport: p.transport,
		// A redirect could lead off loopback; the probe reports it instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return p, nil
}

// isLoopback reports whether host is "localhost" or a loopback IP literal.
// Names are not resolved: a name that resolves to loopback still needs
// AllowRemote, so DNS cannot point the probe elsewhere.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// variant returns a payload that differs from body in content, not only in
// formatting, so that a server fingerprinting canonical JSON still sees a
// different request.
func variant(body []byte, contentType string) []byte {
	var obj map[string]any
	if json.Unmarshal(body, &obj) == nil && obj != nil {
		obj["idem_probe_variant"] = 1
		if b, err := json.Marshal(obj); err == nil {
			return b
		}
	}
	if strings.HasPrefix(contentType, "application/x-www-form-urlencoded") {
		if len(body) == 0 {
			return []byte("idem_probe_variant=1")
		}
		return append(bytes.Clone(body), "&idem_probe_variant=1"...)
	}
	return append(bytes.Clone(body), '\n')
}

// newKey returns a fresh idempotency key, so that no check sees another's.
func newKey() string { return "idem-probe-" + rand.Text() }
