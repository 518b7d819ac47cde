package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/httpwire"
	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/store"
)

// OriginalStatusHeader carries, on a reconcile lookup's 200, the status of
// the upstream's original response to the request (docs/reconcile.md).
const OriginalStatusHeader = "Idempotency-Original-Status"

// maxReconciledBody bounds the body of a lookup's answer, which becomes
// the replayed response: idemhttp's default replay buffer.
const maxReconciledBody = 1 << 20

// reconciler asks the upstream, by a GET on a URL made from a template,
// whether a request whose outcome is unknown took effect.
type reconciler struct {
	template string
	token    string
	keep     []string // the headers of an answer kept for replay: those an ordinary replay carries
	client   *http.Client
}

// newReconciler returns the lookup of a reconcile URL template (flag is
// where it was set, for errors); replayHeaders are the --replay-headers,
// whose values a reconciled result keeps as an ordinary one does.
func newReconciler(flag, template, token string, transport http.RoundTripper, replayHeaders []string) (*reconciler, error) {
	if !strings.Contains(template, "{key}") {
		return nil, fmt.Errorf("gateway: %s %q must hold {key}", flag, redact.URL(template))
	}
	if name, part := misplacedPlaceholder(template); name != "" {
		why := "a client's key or tenant would choose the server the lookup and its token go to"
		if part == "fragment" {
			why = "a fragment is never sent"
		}
		return nil, fmt.Errorf("gateway: %s %q has %s in its %s: a placeholder may stand only in the path and the query (%s)",
			flag, redact.URL(template), name, part, why)
	}
	u, err := url.Parse(expandTemplate(template, store.Record{ID: store.ID{Tenant: "t", Key: "k"}, Fence: 1}))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("gateway: %s %q must be an http:// or https:// URL template", flag, redact.URL(template))
	}
	keep := slices.Concat(httpwire.ReplayedByDefault, replayHeaders)
	for i, name := range keep {
		keep[i] = http.CanonicalHeaderKey(name)
	}
	return &reconciler{template: template, token: token, keep: keep,
		client: &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect is no answer of the lookup
		}}}, nil
}

// placeholders are what expandTemplate fills in.
var placeholders = []string{"{key}", "{tenant}", "{fence}"}

// misplacedPlaceholder returns a placeholder of template that stands
// outside the path and the query, and the part it stands in. In the
// scheme, the user information, the host or the port, a client's key or
// tenant would pick the server the gateway sends its bearer token to (or
// break the URL for every key that is no host name); in the fragment it
// would never be sent. The parts are cut as url.Parse cuts them: the
// fragment at the first "#", the authority from "://" to the first "/",
// "?" or "#", the user information up to its last "@".
func misplacedPlaceholder(template string) (name, part string) {
	rest, fragment, _ := strings.Cut(template, "#")
	var scheme, user, host string
	if before, after, ok := strings.Cut(rest, "://"); ok {
		scheme, host = before, after
		if i := strings.IndexAny(after, "/?"); i >= 0 {
			host = after[:i]
		}
		if at := strings.LastIndexByte(host, '@'); at >= 0 {
			user, host = host[:at], host[at+1:]
		}
	}
	for _, p := range [][2]string{{"scheme", scheme}, {"user information", user}, {"host or port", host}, {"fragment", fragment}} {
		for _, name := range placeholders {
			if strings.Contains(p[1], name) {
				return name, p[0]
			}
		}
	}
	return "", ""
}

// expandTemplate fills {key}, {tenant} and {fence} in, each escaped so
// that it stays one path segment or one query value.
func expandTemplate(template string, rec store.Record) string {
	return strings.NewReplacer("{key}", escapeAll(rec.Key), "{tenant}", escapeAll(rec.Tenant),
		"{fence}", strconv.FormatInt(rec.Fence, 10)).Replace(template)
}

// escapeAll percent-encodes every byte but RFC 3986's unreserved ones,
// which is right in a path segment and in a query value alike.
func escapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// hideURLSecrets hides the password and secret parameters (?token=) of
// the URL that a *url.Error names: the engine logs the lookup's error, and
// they are hidden everywhere else, as at start.
func hideURLSecrets(err error) error {
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		ue.URL = redact.URL(ue.URL)
	}
	return err
}

// reconcile is idem.Options.Reconcile: 200 with the original status, the
// key echoed and the fence and tenant of the request found equal to rec's →
// completed with that response; 404 with the key echoed → not executed;
// anything else (another status, no echo, another fence or none, a bad
// status header, a body too large, a network error, ctx's end) → an
// error, and the key stays UNKNOWN. The key's echo keeps a 404 of a wrong
// URL or a 200 of a page that is not the lookup from being taken for an
// answer; the fence's and the tenant's prove that a 200 is about this
// attempt, not about another tenant's request under the same key nor an
// earlier attempt.
func (rc *reconciler) reconcile(ctx context.Context, rec store.Record) (idem.Resolution, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, expandTemplate(rc.template, rec), nil)
	if err != nil {
		// newReconciler keeps placeholders out of the host, so this
		// takes no client's bytes; the error quotes the URL, as below.
		return idem.Resolution{}, fmt.Errorf("reconcile lookup: %w", hideURLSecrets(err))
	}
	req.Header.Set(idemhttp.HeaderKey, rec.Key)
	req.Header.Set(FenceHeader, strconv.FormatInt(rec.Fence, 10))
	if rec.Tenant != "" {
		req.Header.Set(TenantIDHeader, rec.Tenant)
	}
	if rc.token != "" {
		req.Header.Set("Authorization", "Bearer "+rc.token)
	}
	resp, err := rc.client.Do(req)
	if err != nil {
		return idem.Resolution{}, fmt.Errorf("reconcile lookup: %w", hideURLSecrets(err))
	}
	defer resp.Body.Close()
	noteLookupStatus(ctx, resp.StatusCode)
	if got := resp.Header.Get(idemhttp.HeaderKey); got != rec.Key {
		return idem.Resolution{}, fmt.Errorf("reconcile lookup answered %d without echoing the key in %s", resp.StatusCode, idemhttp.HeaderKey)
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return idem.Resolution{Verdict: idem.VerdictNotExecuted}, nil
	case http.StatusOK:
	default:
		return idem.Resolution{}, fmt.Errorf("reconcile lookup answered %d", resp.StatusCode)
	}
	if err := checkEchoes(resp.Header, rec); err != nil {
		return idem.Resolution{}, err
	}
	if fence, err := strconv.ParseInt(resp.Header.Get(FenceHeader), 10, 64); err != nil || fence != rec.Fence {
		return idem.Resolution{}, fmt.Errorf("reconcile lookup answered 200 for %s %q, not this attempt's %d: no proof it is this request's answer",
			FenceHeader, resp.Header.Get(FenceHeader), rec.Fence)
	}
	// The fence alone does not tell tenants apart: a store that floors
	// fences by its clock (Redis, whose coalesced batch reads the clock
	// once) can give two tenants' first attempts at one key the same one.
	if got := resp.Header.Get(TenantIDHeader); got != rec.Tenant {
		return idem.Resolution{}, fmt.Errorf("reconcile lookup answered 200 for %s %q, not this attempt's: no proof it is this request's answer",
			TenantIDHeader, got)
	}
	status, err := strconv.Atoi(resp.Header.Get(OriginalStatusHeader))
	if err != nil || status < 200 || status > 599 {
		return idem.Resolution{}, fmt.Errorf("reconcile lookup answered 200 without a valid %s (200..599)", OriginalStatusHeader)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReconciledBody+1))
	switch {
	case err != nil:
		return idem.Resolution{}, fmt.Errorf("reconcile lookup: reading the body: %w", err)
	case len(body) > maxReconciledBody:
		return idem.Resolution{}, fmt.Errorf("reconcile lookup: the body is over %d bytes", maxReconciledBody)
	}
	res := store.Result{Status: status, Body: body}
	for _, name := range rc.keep {
		if vs, ok := resp.Header[name]; ok {
			if res.Header == nil {
				res.Header = http.Header{}
			}
			res.Header[name] = vs
		}
	}
	return idem.Resolution{Verdict: idem.VerdictCompleted, Result: res}, nil
}

// contractError is a lookup's 200 without the echoes docs/reconcile.md
// requires: Idempotency-Fence, and Idempotency-Tenant for a key with a
// tenant. A lookup written to the earlier contract (the key only) answers
// so for every key: none is ever settled, so it is an error of the
// lookup, logged as one and counted by what is missing
// (idem_reconcile_contract_errors_total), not one more unprovable answer.
type contractError struct {
	Missing []string // "fence", "tenant"
}

func (e *contractError) Error() string {
	headers := make([]string, len(e.Missing))
	for i, m := range e.Missing {
		headers[i] = contractHeaders[m]
	}
	return fmt.Sprintf("reconcile lookup answered 200 without %s: it follows the earlier contract (the key only) and settles no key; "+
		"make its 200 echo the request's %s and %s headers (docs/reconcile.md)", strings.Join(headers, " and "), FenceHeader, TenantIDHeader)
}

// contractHeaders are the headers a lookup's 200 echoes, by the name
// contractError.Missing (and the metric's label) gives them.
var contractHeaders = map[string]string{"fence": FenceHeader, "tenant": TenantIDHeader}

// checkEchoes returns a contractError when a 200's header lacks an echo
// it must carry. An echo of another value is no breach of the contract:
// it is another attempt's answer, which reconcile refuses as such.
func checkEchoes(h http.Header, rec store.Record) error {
	var missing []string
	if h.Get(FenceHeader) == "" {
		missing = append(missing, "fence")
	}
	if h.Get(TenantIDHeader) == "" && rec.Tenant != "" {
		missing = append(missing, "tenant")
	}
	if missing == nil {
		return nil
	}
	return &contractError{Missing: missing}
}
