package gateway

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/idemkit/idem/idemhttp"
)

// The codes of the admin API's refusals of a request that a browser may
// have been made to send from elsewhere. Each is refused before the token
// is looked at, and nothing is read or changed.
const (
	CodeAdminHostRefused   = "admin_host_refused"   // 403 (admin API): Host is not the admin address, loopback on its port, or an --admin-hosts name (DNS rebinding)
	CodeAdminOriginRefused = "admin_origin_refused" // 403 (admin API): Origin names another site, or Sec-Fetch-Site says cross-site (or same-site without an allowed Origin)
	CodeAdminContentType   = "admin_content_type"   // 415 (admin API): a POST, PUT, PATCH or DELETE without Content-Type: application/json
)

// adminHosts says which Host (and Origin) a request to the admin API may
// name. A browser tricked into calling the admin API names the attacker's
// site: in Origin (a page of theirs calling it), or in Host (their name,
// rebound by DNS to the admin's address), and neither is among the
// allowed hosts, which are:
//
//   - the admin listener's own address on its port: its IP, or its name;
//     when it listens on every address (0.0.0.0, ::), any IP literal (a
//     rebinding needs a name the attacker controls, never an IP);
//   - loopback on its port: localhost, 127.0.0.0/8, ::1 (an SSH tunnel
//     from the same port);
//   - a name of --admin-hosts: on any port, or on the one it gives.
type adminHosts struct {
	addr  string            // the listener's address, for messages
	host  string            // the listener's host: an IP, a name, or "" for every address
	port  string            // the listener's port
	names map[string]string // --admin-hosts: name → port, or "" for any
}

// newAdminHosts returns the hosts allowed for an admin API that listens
// on listen (host:port, as bound when known) with the --admin-hosts
// extra.
func newAdminHosts(listen string, extra []string) (*adminHosts, error) {
	a := &adminHosts{addr: listen, names: map[string]string{}}
	if host, port, err := net.SplitHostPort(listen); err == nil {
		a.host, a.port = canonicalHost(host), port
		if ip := net.ParseIP(a.host); ip != nil && ip.IsUnspecified() {
			a.host = ""
		}
	}
	for _, entry := range extra {
		host, port, err := net.SplitHostPort(entry)
		if err != nil { // a name without a port, or a bare IPv6 address
			host, port = entry, ""
		}
		host = canonicalHost(host)
		if p, perr := strconv.Atoi(port); !validHost(host) || port != "" && (perr != nil || p < 1 || p > 65535) {
			return nil, fmt.Errorf("gateway: --admin-hosts %q: want a host name or IP, optionally with :port (no scheme, no path)", entry)
		}
		a.names[host] = port
	}
	return a, nil
}

// bound returns the hosts of the listener as bound at addr: its port is
// the one bound (--admin ...:0 picks one), its host the one --admin named.
func (a *adminHosts) bound(addr net.Addr) *adminHosts {
	b := *a
	b.addr = addr.String()
	if _, port, err := net.SplitHostPort(b.addr); err == nil {
		b.port = port
	}
	return &b
}

// validHost reports whether host is an IP or a DNS name.
func validHost(host string) bool {
	if net.ParseIP(host) != nil {
		return true
	}
	return host != "" && !strings.HasPrefix(host, ".") && strings.Trim(host, "abcdefghijklmnopqrstuvwxyz0123456789-._") == ""
}

// canonicalHost is host as compared: lower case, without IPv6 brackets
// or a name's trailing dot.
func canonicalHost(host string) string {
	host = strings.TrimSuffix(strings.TrimPrefix(strings.ToLower(host), "["), "]")
	return strings.TrimSuffix(host, ".")
}

// allows reports whether a request may name host on port.
func (a *adminHosts) allows(host, port string) bool {
	host = canonicalHost(host)
	if p, ok := a.names[host]; ok && (p == "" || p == port) {
		return true
	}
	if port != a.port || a.port == "" || host == "" {
		return false
	}
	ip := net.ParseIP(host)
	switch {
	case host == "localhost" || ip != nil && ip.IsLoopback():
		return true
	case a.host == "":
		return ip != nil
	case ip != nil:
		return ip.Equal(net.ParseIP(a.host))
	}
	return host == a.host
}

// allowsHost checks a request's Host header; without a port it is 80.
func (a *adminHosts) allowsHost(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, "80"
	}
	return a.allows(host, port)
}

// allowsOrigin checks an Origin header: http or https, an allowed host,
// the port defaulting to the scheme's. "null" (a sandboxed frame, a file)
// is no allowed origin.
func (a *adminHosts) allowsOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	port := u.Port()
	switch {
	case port != "":
	case u.Scheme == "http":
		port = "80"
	case u.Scheme == "https":
		port = "443"
	default:
		return false
	}
	return a.allows(u.Hostname(), port)
}

// guardHost refuses a request whose Host is not allowed: the answer to a
// page that DNS rebinding pointed at the admin API.
func (g *Gateway) guardHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hosts := g.adminHosts.Load(); !hosts.allowsHost(r.Host) {
			idemhttp.WriteProblem(w, http.StatusForbidden, CodeAdminHostRefused, fmt.Sprintf(
				"Host %q is not this admin API's address (%s), loopback on its port, or a name of --admin-hosts: "+
					"the admin API answers no other name, so that a page whose name DNS rebinds to it cannot use it. "+
					"Call it by its address, or add the name (name or name:port) to --admin-hosts", r.Host, hosts.addr))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// guardBrowser refuses, on the API under /v1/, what a page of another
// site can make a browser send: a request with a foreign Origin (or
// several), one that Sec-Fetch-Site says comes from another site (or from
// the same site without an allowed Origin), and a change (POST, PUT,
// PATCH, DELETE) that is not application/json, which a form or a simple
// cross-origin fetch cannot send without a CORS preflight (which the
// admin API never grants).
func (g *Gateway) guardBrowser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := g.browserRefusal(r); why != "" {
			idemhttp.WriteProblem(w, http.StatusForbidden, CodeAdminOriginRefused, why)
			return
		}
		if changes(r.Method) {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				idemhttp.WriteProblem(w, http.StatusUnsupportedMediaType, CodeAdminContentType, fmt.Sprintf(
					"a %s to the admin API needs Content-Type: application/json (got %q), with or without a body: "+
						"a page of another site cannot send that without the browser asking first, and the admin API never says yes",
					r.Method, r.Header.Get("Content-Type")))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// browserRefusal says why r looks sent by a page of another site, or "".
func (g *Gateway) browserRefusal(r *http.Request) string {
	origins := r.Header.Values("Origin")
	switch {
	case len(origins) > 1:
		return "more than one Origin header"
	case len(origins) == 1 && !g.adminHosts.Load().allowsOrigin(origins[0]):
		return fmt.Sprintf("Origin %q is not this admin API's (its address, loopback on its port, or a name of --admin-hosts): "+
			"a page of another site may not call it", origins[0])
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); {
	case site == "cross-site":
		return "Sec-Fetch-Site: cross-site: a page of another site may not call the admin API"
	case site == "same-site" && len(origins) == 0:
		return "Sec-Fetch-Site: same-site without an Origin: another origin of this site (another port, another name) may not call the admin API"
	}
	return ""
}

// changes reports whether a method may change something.
func changes(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}
