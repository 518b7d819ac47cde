package gateway

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// CodeAmbiguousRequest (400): the request is spelled so that servers
// disagree on which endpoint it is for (a method not in upper case, a
// dot segment, a path whose spellings lead to two routes): the gateway
// cannot tell which policy protects it, so it is not forwarded.
const CodeAmbiguousRequest = "ambiguous_request"

// The spellings of one request. A route's policy must hold for every
// request that a common upstream framework (Express, ASP.NET, Spring,
// Rails, Django, Go's ServeMux with its redirects) could route to the
// route's endpoint: those frameworks differ in how they read a path, and
// the gateway cannot know the upstream's. So a request is matched as it
// is written and in its canonical form (canonPath): methods without
// case, paths percent-decoded, case-folded, without ";parameters",
// trailing dots and spaces of a segment, empty segments and the trailing
// slash; and that form again without a format suffix on its last segment
// (withoutFormat: /v1/charges.json, /v1/charges.x-y and
// /v1/charges.json.json are /v1/charges to Rails or Spring). A method
// override (X-HTTP-Method-Override, _method; override.go) is another
// reading of the method. Of the routes these spellings lead to, the one
// that protects the request wins; a route wins over the top level; two
// different routes that both protect it are ambiguous (400). Over-
// protecting a distinct endpoint is the safe side; escaping protection is
// a defect. What the upstream gets is the request as the client wrote it.

// checkTarget refuses, before any route or key, what could only be
// forwarded under a guess: a method not in upper case ("post": Django
// and ASP.NET take it for POST, Go's ServeMux and Spring for another
// method, so it could reach a protected endpoint unprotected), and a
// request target that is not a path ("PRI * HTTP/2.0", an HTTP/2 preface
// on this HTTP/1 listener; "*" with another method than OPTIONS, which
// net/http answers itself; CONNECT's host:port).
func (g *Gateway) checkTarget(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var why string
		switch {
		case strings.ContainsFunc(r.Method, func(c rune) bool { return 'a' <= c && c <= 'z' }):
			why = "the method " + r.Method + " is not in upper case: servers disagree on whether it is " + strings.ToUpper(r.Method) + "; send " + strings.ToUpper(r.Method)
		case !strings.HasPrefix(r.URL.Path, "/"):
			why = "the request target " + r.RequestURI + " is not a path: the gateway forwards requests for paths only"
		default:
			next.ServeHTTP(w, r)
			return
		}
		g.cfg.ErrorFormat.WriteError(w, http.StatusBadRequest, CodeAmbiguousRequest, why)
		g.rejected(r)
	})
}

// errDotSegment refuses a path with a "." or ".." segment, written or
// percent-encoded: ServeMux and ASP.NET resolve it, Spring refuses it,
// Express routes it as a segment of its own, so the request could reach
// an endpoint of another route than the one its resolved path matches.
// Clients resolve dot segments before they send (RFC 3986 section 5.2).
var errDotSegment = errors.New("the path has a dot segment (. or ..), which servers resolve, refuse or route as written: send the path without it")

// segments calls f with each segment of the escaped path, percent-decoded,
// and split again at a decoded slash or backslash when split is set.
func segments(escaped string, split bool, f func(seg string)) {
	for raw := range strings.SplitSeq(escaped, "/") {
		seg, err := url.PathUnescape(raw)
		if err != nil {
			seg = raw // not a valid escape: as written (net/http refuses it in a request)
		}
		if !split {
			f(seg)
			continue
		}
		for part := range strings.FieldsFuncSeq(seg, func(c rune) bool { return c == '/' || c == '\\' }) {
			f(part)
		}
	}
}

// hasDotSegment reports whether the escaped path has a "." or ".."
// segment under either reading of an encoded slash or a backslash
// (trailing spaces ignored, as Windows servers ignore them).
func hasDotSegment(escaped string) bool {
	if !strings.ContainsAny(escaped, ".%") {
		return false // the common case, without a scan of each segment
	}
	found := false
	segments(escaped, true, func(seg string) {
		if t := strings.TrimRight(seg, " "); t == "." || t == ".." {
			found = true
		}
	})
	return found
}

// hasSeparatorInSegment reports whether the escaped path holds a slash or
// a backslash that some servers take for a separator and others for a
// character of its segment (%2F, %5C, \).
func hasSeparatorInSegment(escaped string) bool {
	for _, s := range []string{"%2F", "%2f", "%5C", "%5c", "\\"} {
		if strings.Contains(escaped, s) {
			return true
		}
	}
	return false
}

// canonPath is the canonical form of an escaped path: each segment
// percent-decoded, cut at its first ';' (a path parameter), case-folded,
// without trailing dots and spaces; "." and ".." resolved; empty segments
// (a double slash, a trailing slash) dropped; each segment escaped again,
// so that a decoded slash stays inside its segment unless split is set,
// which takes decoded slashes and backslashes for separators.
// canonPath(canonPath(p)) == canonPath(p).
func canonPath(escaped string, split bool) string {
	if !split && isCanonPath(escaped) {
		return escaped
	}
	var out []string
	segments(escaped, split, func(seg string) {
		if i := strings.IndexByte(seg, ';'); i >= 0 {
			seg = seg[:i]
		}
		seg = strings.ToLower(seg)
		switch strings.TrimRight(seg, " ") {
		case ".":
			return
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			return
		}
		if seg = strings.TrimRight(seg, ". "); seg != "" {
			out = append(out, url.PathEscape(seg))
		}
	})
	return "/" + strings.Join(out, "/")
}

// withoutFormat appends to dst the canonical path c without a format
// suffix of its last segment: everything after one of its first n+1 dots
// that follow a name (not a leading dot, as in ".env"). Frameworks route
// more suffixes than ".json": Rails routes "/v1/orders(.:format)" with a
// format of any characters but '.', '/' and '?' (/v1/orders.x-y,
// /v1/orders.v1_0, /v1/orders.x~1), Spring's suffix matching routes
// "/v1/orders.*" (/v1/orders.json.json too), Express may route
// "/v1/orders.:format". So every dot may begin one, up to n+1 of them,
// where n is the most dots a literal segment of a route's pattern holds
// (routeTable.formatDots): a cut at a later dot leaves a name that holds
// more dots than any route's, which no route matches, and bounds the
// readings of a path of many dots. Each result is canonical too
// (canonPath(..., split) of the cut path).
func withoutFormat(dst []string, c string, split bool, n int) []string {
	slash := strings.LastIndexByte(c, '/')
	last := c[slash+1:]
	name := strings.IndexFunc(last, func(r rune) bool { return r != '.' }) // leading dots begin a name
	if name < 0 {
		return dst
	}
	for i, cuts := name+1, 0; i < len(last) && cuts <= n; i++ {
		if last[i] != '.' {
			continue
		}
		cuts++
		if i == len(last)-1 {
			break // a trailing dot: canonPath has already dropped it
		}
		dst = append(dst, canonPath(c[:slash+1+i], split))
	}
	return dst
}

// isCanonPath reports, without allocating, whether canonPath would
// return p itself: the common case of a request written plainly, in
// lower case, with none of the characters that canonPath escapes.
func isCanonPath(p string) bool {
	if p == "/" {
		return true
	}
	if p == "" || p[0] != '/' || p[len(p)-1] == '/' || p[len(p)-1] == '.' || strings.Contains(p, "//") || strings.Contains(p, "./") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~$&+=:@/", c) >= 0) {
			return false
		}
	}
	return true
}

// canonPattern is a route's pattern in the canonical form of the requests
// it is to match: the method in upper case, each literal path segment
// as canonPath makes it (wildcards as written), and the trailing slash of
// a subtree kept.
func canonPattern(pattern string) string {
	method, rest := "", strings.TrimSpace(pattern)
	if i := strings.IndexAny(rest, " \t"); i >= 0 {
		method, rest = strings.ToUpper(rest[:i])+" ", strings.TrimLeft(rest[i+1:], " \t")
	}
	path := rest
	if !strings.HasPrefix(path, "/") {
		return pattern // no path, or a host: refused before (register, checkHost)
	}
	var out []string
	for seg := range strings.SplitSeq(path, "/") {
		switch {
		case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}"):
			out = append(out, seg)
		case seg != "":
			if c := canonPath("/"+seg, false); c != "/" {
				out = append(out, c[1:])
			}
		}
	}
	canon := "/" + strings.Join(out, "/")
	if strings.HasSuffix(path, "/") && canon != "/" {
		canon += "/"
	}
	return method + canon
}
