// Package console is the operator's console of `idem serve`: a page, served
// by the admin API at /ui/, for the UNKNOWN keys an operator settles and
// the gateway's last hour at a glance.
//
// The console is static: HTML, CSS and JavaScript modules embedded in the
// binary, with nothing to build and nothing fetched from elsewhere. Its
// files hold no data and no secret, so they are served without the admin
// token; the page asks the operator for the token, keeps it in the tab's
// sessionStorage and sends it as "Authorization: Bearer" with each call to
// the admin API. No cookie carries it, so another site cannot make the
// browser act with it (no CSRF); and the admin API itself refuses a
// foreign Host (DNS rebinding), a foreign Origin and a change that is not
// application/json, so the page sends every change as JSON. Each call
// ends after a bound, and a view that got no answer says so, with a Retry.
//
// # What keeps hostile data inert
//
// Keys, tenants, reasons, headers and bodies come from clients and
// upstreams. The scripts put them in the page with textContent and DOM
// calls only, never as HTML; the files are served with a
// Content-Security-Policy that allows scripts from the admin API's origin
// only (no inline script, no eval), so markup that slipped through could
// not run; with nosniff; and the page cannot be framed.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// Path is where the admin API serves the console.
const Path = "/ui/"

// ContentSecurityPolicy is the policy the console's files are served with:
// everything from the admin API's origin only, no inline script or style,
// no plugins, no framing, no form posted anywhere.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console's files under Path with the security headers.
func Handler() http.Handler {
	files, _ := fs.Sub(static, "static") // a valid path: Sub cannot fail
	serve := http.StripPrefix(Path, http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache") // a new binary's files are fetched anew
		switch {
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the console's files are read with GET", http.StatusMethodNotAllowed)
		case r.URL.Path != Path && strings.HasSuffix(r.URL.Path, "/"):
			http.NotFound(w, r) // no listing of the console's folders
		default:
			serve.ServeHTTP(w, r)
		}
	})
}
