package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// Route is the policy of the requests one pattern matches: a route of the
// config file (docs/configuration.md). Its nil and
// empty fields take the top-level Config's. A request that no route
// matches gets the top-level settings.
type Route struct {
	// Pattern is an http.ServeMux pattern, [METHOD ]/PATH, matched by a
	// ServeMux with its precedence: the most specific pattern wins, and
	// two patterns of which neither is more specific are an error. A
	// pattern with a host is an error (checkHost).
	Pattern string `yaml:"match"`
	// Name names the route in logs and errors. A route with its own
	// ReconcileURL needs one: its keys' fingerprints carry it, so that a
	// lookup, even the background sweep's, asks this route's URL.
	Name string `yaml:"name"`
	// PassThrough forwards the route's requests without idempotency.
	PassThrough bool `yaml:"pass-through"`
	// Methods are the methods the route protects; nil: the top-level
	// methods (Config.Methods).
	Methods []string `yaml:"methods"`
	// RequireKey answers 400 key_required to a protected request without
	// a key; nil: the top-level require-key (Config.RequireKey).
	RequireKey *bool `yaml:"require-key"`
	// Lease is how long a request owns its key; nil: the top-level lease
	// (Config.Lease).
	Lease *time.Duration `yaml:"lease"`
	// Retention is how long a finished response is replayed; nil: the
	// top-level retention (Config.Retention).
	Retention *time.Duration `yaml:"retention"`
	// Wait is how long a request waits for one in flight with its key
	// and replays it, instead of 409; nil: the top-level wait (Config.Wait).
	Wait *time.Duration `yaml:"wait"`
	// UpstreamTimeout bounds the route's upstream calls; nil: the
	// top-level upstream-timeout (Config.UpstreamTimeout). A protected
	// route's lease must be at least as long (policy.go, checkLease).
	UpstreamTimeout *time.Duration `yaml:"upstream-timeout"`
	// KeyFrom is where the key is: "" or "header" (the Idempotency-Key
	// header), or "json:POINTER", a string field of a JSON body named by a
	// JSON Pointer (RFC 6901), e.g. json:/request_id (bodykey.go).
	KeyFrom string `yaml:"key-from"`
	// Fingerprint is which part of a JSON body the fingerprint covers
	// (FingerprintRule); empty: all of it.
	Fingerprint FingerprintRule `yaml:"fingerprint"`
	// Statuses change what becomes of a key after each upstream status
	// (StatusOverrides); empty: the error format's policy.
	Statuses StatusOverrides `yaml:"statuses"`
	// ReconcileURL is the route's own lookup, a URL template with {key}
	// (docs/reconcile.md); empty: the top-level reconcile-url
	// (Config.ReconcileURL).
	ReconcileURL string `yaml:"reconcile-url"`
	// Source says where the route was defined ("idem.yaml:12"), for errors
	// that name another route than the one they are about.
	Source string `yaml:"-"`
}

// label names the route in metrics (the route label), the access log and
// spans: its name, else its match; "" for the top level's. Their number
// is the config file's: a request's path never becomes a label.
func (rt Route) label() string {
	if rt.Name != "" {
		return rt.Name
	}
	return rt.Pattern
}

// FieldError is a bad value in one field of the configuration. Path names
// the field as the config file does: routes[2].fingerprint.ignore[0].
type FieldError struct {
	Path string
	Err  error
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Err.Error() }

func (e *FieldError) Unwrap() error { return e.Err }

// inField prefixes the path of a FieldError with prefix, or makes err one
// about the field at prefix.
func inField(prefix string, err error) error {
	if fe, ok := errors.AsType[*FieldError](err); ok {
		return &FieldError{Path: prefix + "." + fe.Path, Err: fe.Err}
	}
	return &FieldError{Path: prefix, Err: err}
}

var routeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// registeredAt is the Go source position in ServeMux's panics, which says
// nothing to an operator.
var registeredAt = regexp.MustCompile(` \(registered at [^)]*\)`)

// routeTable sends each request to the route whose pattern matches it,
// under every spelling of its path (canon.go), or to fallback,
// unless a method override reads it otherwise (override.go). A gateway
// without routes has one too, for the override.
type routeTable struct {
	exact   *http.ServeMux // the patterns as written
	canon   *http.ServeMux // the patterns in canonical form; exact itself when they are already
	subtree bool           // some pattern matches a path ending in a slash (/x/, /x/{$}, /x/{rest...})
	// formatDots is the most dots a literal segment of a canonical
	// pattern holds: withoutFormat cuts a path's last segment at up to
	// one more dot than that.
	formatDots int
	fallback   *routeEntry
	// protected are the methods some route (or the top level) protects:
	// a request of another method is protected under no reading of it.
	protected map[string]bool
	none      bool  // no routes: every request is fallback's
	maxBody   int64 // the body limit, for a form body read for its _method (override.go)
	format    idemhttp.ErrorFormat
	reject    func(*http.Request)
}

// routeEntry is one route's handler (or the top level's), with the
// methods whose requests it protects: nil for a pass-through route.
type routeEntry struct {
	http.Handler
	methods []string
}

func (e *routeEntry) protects(method string) bool { return slices.Contains(e.methods, method) }

// routed marks the handlers registered in a routeTable's muxes, which are
// only asked which route matches: ServeMux's own answers (a redirect to a
// cleaned path, 404, 405) are not the gateway's, which forwards every
// path as the client sent it.
type routed struct{ *routeEntry }

// newRouteTable registers each route's entry under its pattern, as written
// and in canonical form. A bad pattern, one that names a host
// (checkHost), or two routes that conflict (ServeMux cannot say which is
// more specific, or they are one pattern once compared as requests are),
// is a FieldError about the later one's match.
func newRouteTable(routes []Route, entries []*routeEntry, fallback *routeEntry, format idemhttp.ErrorFormat, reject func(*http.Request)) (*routeTable, error) {
	t := &routeTable{exact: http.NewServeMux(), canon: http.NewServeMux(), fallback: fallback, protected: map[string]bool{},
		format: format, reject: reject, none: len(routes) == 0, maxBody: defaultMaxBody}
	names := map[string]int{}
	same := true // every pattern is already canonical
	for _, e := range append(entries, fallback) {
		for _, m := range e.methods {
			t.protected[m] = true
		}
	}
	for i, rt := range routes {
		field := fmt.Sprintf("routes[%d]", i)
		if rt.Name != "" && !routeName.MatchString(rt.Name) {
			return nil, &FieldError{Path: field + ".name", Err: fmt.Errorf("%q: want up to 64 letters, digits, '.', '_' or '-'", rt.Name)}
		}
		if rt.Name != "" {
			if j, dup := names[rt.Name]; dup {
				return nil, &FieldError{Path: field + ".name", Err: fmt.Errorf("%q is the name of routes[%d] too%s", rt.Name, j, at(routes[j]))}
			}
			names[rt.Name] = i
		}
		if err := register(t.exact, rt.Pattern, routed{entries[i]}); err != nil {
			for j := range i {
				if why := conflict(routes[j].Pattern, rt.Pattern); why != nil {
					err = fmt.Errorf("%q conflicts with routes[%d] %q%s: %w", rt.Pattern, j, routes[j].Pattern, at(routes[j]), why)
					break
				}
			}
			return nil, &FieldError{Path: field + ".match", Err: err}
		}
		if err := checkHost(rt.Pattern); err != nil {
			return nil, &FieldError{Path: field + ".match", Err: err}
		}
		canon := canonPattern(rt.Pattern)
		same = same && canon == rt.Pattern
		for seg := range strings.SplitSeq(canon, "/") {
			if !strings.HasPrefix(seg, "{") {
				t.formatDots = max(t.formatDots, strings.Count(seg, "."))
			}
		}
		t.subtree = t.subtree || strings.HasSuffix(canon, "/") || strings.HasSuffix(canon, "{$}") || strings.HasSuffix(canon, "...}")
		if err := register(t.canon, canon, routed{entries[i]}); err != nil {
			for j := range i {
				if why := conflict(canonPattern(routes[j].Pattern), canon); why != nil {
					err = fmt.Errorf("%q conflicts with routes[%d] %q%s once both are compared as requests are (%q: without case, trailing dots, ';' parameters): %w",
						rt.Pattern, j, routes[j].Pattern, at(routes[j]), canon, why)
					break
				}
			}
			return nil, &FieldError{Path: field + ".match", Err: err}
		}
	}
	if same {
		t.canon = t.exact
	}
	return t, nil
}

func at(rt Route) string {
	if rt.Source == "" {
		return ""
	}
	return " (" + rt.Source + ")"
}

// register is mux.Handle with its panic (a bad pattern, a conflict) as an
// error, without the Go source positions ServeMux puts in it.
func register(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	if strings.TrimSpace(pattern) == "" {
		return errors.New("a pattern is required: [METHOD ]/PATH, e.g. POST /v1/charges")
	}
	defer func() {
		if p := recover(); p != nil {
			msg := registeredAt.ReplaceAllString(fmt.Sprint(p), "")
			err = errors.New(strings.ReplaceAll(msg, "\n", " "))
		}
	}()
	if h == nil {
		h = http.NotFoundHandler()
	}
	mux.Handle(pattern, h)
	return nil
}

// conflict returns ServeMux's explanation of why patterns a and b
// conflict, or nil when they do not.
func conflict(a, b string) error {
	mux := http.NewServeMux()
	register(mux, a, nil)
	err := register(mux, b, nil)
	if err == nil {
		return nil
	}
	_, why, _ := strings.Cut(err.Error(), ": ")
	return errors.New(why)
}

func (t *routeTable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e, err := t.route(r)
	if err != nil {
		t.format.WriteError(w, http.StatusBadRequest, CodeAmbiguousRequest, err.Error())
		t.reject(r)
		return
	}
	if !t.checkOverride(w, r, e) {
		return
	}
	e.ServeHTTP(w, r)
}

// route returns the entry of the route that protects r under some
// reading of its path: as written (and cleaned, as ServeMux
// cleans it: "/v1//charges" is "/v1/charges"), in canonical form, in
// canonical form with its encoded slashes taken for separators, and each
// of these without a format suffix, cut at each dot that may begin one
// (withoutFormat). Of the
// entries these lead to, one that protects r's method wins over one that
// does not, and a route over the top level; two different routes that
// both protect it are an error: which policy would hold? A request of a
// method no route protects goes where it is written to.
func (t *routeTable) route(r *http.Request) (*routeEntry, error) {
	if t.none {
		return t.fallback, nil
	}
	chosen := t.matchExact(r)
	if !t.protected[r.Method] {
		return chosen, nil
	}
	escaped := r.URL.EscapedPath()
	if hasDotSegment(escaped) {
		return nil, errDotSegment
	}
	readings := []string{canonPath(escaped, false)}
	if hasSeparatorInSegment(escaped) {
		readings = append(readings, canonPath(escaped, true))
	}
	for i, n := 0, len(readings); i < n; i++ {
		readings = withoutFormat(readings, readings[i], i == 1, t.formatDots)
	}
	for _, path := range readings {
		switch e := t.matchCanon(r, chosen, path); {
		case e == chosen, !e.protects(r.Method):
		case !chosen.protects(r.Method), chosen == t.fallback:
			chosen = e
		case e != t.fallback:
			return nil, fmt.Errorf("the path %s leads to two routes, depending on how a server reads its case, trailing slash or dots, ';' parameters, encoded slashes or a format suffix (.json): send it as the API spells it", escaped)
		}
	}
	return chosen, nil
}

// matchExact is the entry of r as written, or of its path as ServeMux
// would clean it.
func (t *routeTable) matchExact(r *http.Request) *routeEntry {
	if e, ok := lookup(t.exact, r); ok {
		return e
	}
	if clean := cleanPath(r.URL.Path); clean != r.URL.Path {
		if e, ok := lookup(t.exact, withTarget(r, clean, "")); ok {
			return e
		}
	}
	return t.fallback
}

// matchCanon is the entry of r with the canonical escaped path, among
// the canonical patterns; or of the path with a slash added (a
// subtree's root, which the canonical form writes without it). exact is
// r's entry as written, which it is when nothing was canonicalised: then
// no copy of r is made.
func (t *routeTable) matchCanon(r *http.Request, exact *routeEntry, path string) *routeEntry {
	decoded, _ := url.PathUnescape(path) // canonPath escaped it
	if t.canon == t.exact && path == r.URL.EscapedPath() {
		if exact != t.fallback {
			return exact
		}
	} else if e, ok := lookup(t.canon, withTarget(r, decoded, path)); ok {
		return e
	}
	if t.subtree && path != "/" {
		if e, ok := lookup(t.canon, withTarget(r, decoded+"/", path+"/")); ok {
			return e
		}
	}
	return t.fallback
}

// withTarget is a copy of r, for a lookup only, with another path
// (rawPath: its escaped form, or "" when it is the default one).
func withTarget(r *http.Request, path, rawPath string) *http.Request {
	c, u := *r, *r.URL
	u.Path, u.RawPath = path, rawPath
	c.URL = &u
	return &c
}

func lookup(mux *http.ServeMux, r *http.Request) (*routeEntry, bool) {
	h, _ := mux.Handler(r)
	m, ok := h.(routed)
	return m.routeEntry, ok
}

// cleanPath is ServeMux's: path.Clean, keeping a trailing slash.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// keylessRequests says, for the line idem logs when it starts serving,
// what becomes of a protected request that comes without a key: refused
// with 400 key_required, or forwarded unprotected (no key, nothing to
// deduplicate), by the top-level require-key or by the routes named.
// The operator learns it from the log, not only from the config.
func keylessRequests(c Config) string {
	if !c.RequireKey {
		return "forwarded unprotected (require-key is off; a route may turn it on)"
	}
	var open []string
	for _, rt := range c.Routes {
		if !rt.PassThrough && rt.RequireKey != nil && !*rt.RequireKey {
			name := rt.Name
			if name == "" {
				name = rt.Pattern
			}
			open = append(open, name)
		}
	}
	if len(open) > 0 {
		return "refused (400 key_required), except forwarded unprotected on the routes " + strings.Join(open, ", ")
	}
	return "refused (400 key_required)"
}
