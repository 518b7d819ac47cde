package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"
)

// Route is the policy of the requests one pattern matches: a route of the
// config file (docs/deployment.md, "Configuration file"). Its nil and
// empty fields take the top-level Config's. A request that no route
// matches gets the top-level settings.
type Route struct {
	// Pattern is an http.ServeMux pattern, [METHOD ][HOST]/PATH, matched
	// by a ServeMux with its precedence: the most specific pattern wins,
	// and two patterns of which neither is more specific are an error.
	Pattern string `yaml:"match"`
	// Name names the route in logs and errors. A route with its own
	// ReconcileURL needs one: its keys' fingerprints carry it, so that a
	// lookup, even the background sweep's, asks this route's URL.
	Name string `yaml:"name"`
	// PassThrough forwards the route's requests without idempotency.
	PassThrough bool           `yaml:"pass-through"`
	Methods     []string       `yaml:"methods"`     // the methods protected; nil: Config.Methods
	RequireKey  *bool          `yaml:"require-key"` // nil: Config.RequireKey
	Lease       *time.Duration `yaml:"lease"`       // nil: Config.Lease
	Retention   *time.Duration `yaml:"retention"`   // nil: Config.Retention
	Wait        *time.Duration `yaml:"wait"`        // nil: Config.Wait
	// UpstreamTimeout bounds the route's upstream calls; nil:
	// Config.UpstreamTimeout. A protected route's lease must be at least
	// as long (policy.go, checkLease).
	UpstreamTimeout *time.Duration `yaml:"upstream-timeout"`
	// KeyFrom is where the key is: "" or "header" (the Idempotency-Key
	// header), or "json:POINTER", a string field of a JSON body named by a
	// JSON Pointer (RFC 6901), e.g. json:/request_id (bodykey.go).
	KeyFrom     string          `yaml:"key-from"`
	Fingerprint FingerprintRule `yaml:"fingerprint"`
	Statuses    StatusOverrides `yaml:"statuses"`
	// ReconcileURL is the route's own lookup (docs/reconcile.md); empty:
	// Config.ReconcileURL's.
	ReconcileURL string `yaml:"reconcile-url"`
	// Source says where the route was defined ("idem.yaml:12"), for errors
	// that name another route than the one they are about.
	Source string `yaml:"-"`
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

// routeTable sends each request to the handler of the route whose pattern
// matches it, or to fallback.
type routeTable struct {
	mux      *http.ServeMux
	fallback http.Handler
}

// routed marks the handlers registered in a routeTable's mux, which is
// only asked which route matches: ServeMux's own answers (a redirect to a
// cleaned path, 404, 405) are not the gateway's, which forwards every
// path as the client sent it.
type routed struct{ next http.Handler }

func (h routed) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.next.ServeHTTP(w, r) }

// newRouteTable registers each route's handler under its pattern. A bad
// pattern, or two routes that conflict (ServeMux cannot say which is more
// specific), is a FieldError about the later one's match.
func newRouteTable(routes []Route, handlers []http.Handler, fallback http.Handler) (*routeTable, error) {
	t := &routeTable{mux: http.NewServeMux(), fallback: fallback}
	names := map[string]int{}
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
		if err := register(t.mux, rt.Pattern, routed{handlers[i]}); err != nil {
			for j := range i {
				if why := conflict(routes[j].Pattern, rt.Pattern); why != nil {
					err = fmt.Errorf("%q conflicts with routes[%d] %q%s: %w", rt.Pattern, j, routes[j].Pattern, at(routes[j]), why)
					break
				}
			}
			return nil, &FieldError{Path: field + ".match", Err: err}
		}
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
		return errors.New("a pattern is required: [METHOD ][HOST]/PATH, e.g. POST /v1/charges")
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

func (t *routeTable) ServeHTTP(w http.ResponseWriter, r *http.Request) { t.route(r).ServeHTTP(w, r) }

// route returns the handler of the route that matches r. A path that
// ServeMux would clean first (a double slash, a dot segment) gets the
// route of the cleaned path, as an upstream that cleans paths would
// route it: "/v1//charges" is not a way around the policy of
// "/v1/charges". A path that matches only with a slash added does not.
func (t *routeTable) route(r *http.Request) http.Handler {
	if h, ok := t.match(r); ok {
		return h
	}
	if clean := cleanPath(r.URL.Path); clean != r.URL.Path {
		c, u := *r, *r.URL
		u.Path, u.RawPath = clean, ""
		c.URL = &u
		if h, ok := t.match(&c); ok {
			return h
		}
	}
	return t.fallback
}

func (t *routeTable) match(r *http.Request) (http.Handler, bool) {
	h, _ := t.mux.Handler(r)
	m, ok := h.(routed)
	return m.next, ok
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
