package gateway

import (
	"net/url"
	"strings"
	"testing"
)

// The canonical form of a path and a pattern (canon.go).
func TestCanonicalForms(t *testing.T) {
	for _, c := range []struct {
		path, canon, split string // split: "" when the same as canon
	}{
		{"/v1/orders", "/v1/orders", ""},
		{"/", "/", ""},
		{"", "/", ""},
		{"/v1/orders/", "/v1/orders", ""},
		{"/v1/orders///", "/v1/orders", ""},
		{"/V1/Orders", "/v1/orders", ""},
		{"/v1/orders;v=1", "/v1/orders", ""},
		{"/v1;a/orders;b=2;c", "/v1/orders", ""},
		{"/v1/orders%3Bv=1", "/v1/orders", ""},
		{"/v1/orders%20", "/v1/orders", ""},
		{"/v1/orders.", "/v1/orders", ""},
		{"/v1/orders.%20.", "/v1/orders", ""},
		{"/v1//orders", "/v1/orders", ""},
		{"/v1/%6Frders", "/v1/orders", ""},
		{"/v1/x/../orders", "/v1/orders", ""},
		{"/v1/./orders", "/v1/orders", ""},
		{"/v1/%2e%2E/orders", "/orders", ""},
		{"/../../orders", "/orders", ""},
		{"/v1/a%2Fb", "/v1/a%2Fb", "/v1/a/b"},
		{"/v1/a%2fB", "/v1/a%2Fb", "/v1/a/b"},
		{"/v1/a%5Cb", "/v1/a%5Cb", "/v1/a/b"},
		{`/v1/a\b`, "/v1/a%5Cb", "/v1/a/b"},
		{"/v1/a%2F..%2Fb", "/v1/a%2F..%2Fb", "/v1/b"},
		{"/v1/caf%C3%A9", "/v1/caf%C3%A9", ""},
		{"/v1/CAF%C3%89", "/v1/caf%C3%A9", ""},
		{"/v1/a(b)", "/v1/a%28b%29", ""},
	} {
		if got := canonPath(c.path, false); got != c.canon {
			t.Errorf("canonPath(%q) = %q; want %q", c.path, got, c.canon)
		}
		want := c.split
		if want == "" {
			want = c.canon
		}
		if got := canonPath(c.path, true); got != want {
			t.Errorf("canonPath(%q, split) = %q; want %q", c.path, got, want)
		}
	}
	for pattern, want := range map[string]string{
		"POST /v1/orders": "POST /v1/orders", "post /V1/Orders/": "POST /v1/orders/", "POST\t/V1/{ID}/x": "POST /v1/{ID}/x",
		"/v1/{rest...}": "/v1/{rest...}", "/v1/orders/{$}": "/v1/orders/{$}", "/": "/", "GET /a;b/c.": "GET /a/c",
	} {
		if got := canonPattern(pattern); got != want {
			t.Errorf("canonPattern(%q) = %q; want %q", pattern, got, want)
		}
	}
	for _, c := range []struct {
		path string
		dots int    // the most dots a route's literal segment holds
		want string // the readings, joined by " "
	}{
		{"/v1/charges.json", 0, "/v1/charges"}, {"/v1/files/report.pdf", 0, "/v1/files/report"},
		// Rails' format is [^./?]+, Spring's suffix "*": any character.
		{"/v1/orders.x-y", 0, "/v1/orders"}, {"/v1/orders.v1_0", 0, "/v1/orders"}, {"/v1/orders.x~1", 0, "/v1/orders"},
		{"/v1/orders.json.json", 0, "/v1/orders"}, {"/v1/a.j%C3%A9", 0, "/v1/a"}, {"/v1/a%20.json", 0, "/v1/a"},
		{"/v1/orders.a%2Fb", 0, "/v1/orders"}, {"/v1/a..json", 0, "/v1/a"},
		// A route with a dotted name: one cut more for each of its dots.
		{"/v1/a.b.xml", 1, "/v1/a /v1/a.b"}, {"/v1/a.b.c.d", 1, "/v1/a /v1/a.b"}, {"/v1/a.b.c.d", 5, "/v1/a /v1/a.b /v1/a.b.c"},
		{"/v1/.well-known.json", 1, "/v1/.well-known"},
		{"/v1/charges", 0, ""}, {"/v1/.env", 0, ""}, {"/v1/..env", 3, ""}, {"/v1.json/a", 0, ""}, {"/.json", 0, ""},
	} {
		if got := strings.Join(withoutFormat(nil, c.path, false, c.dots), " "); got != c.want {
			t.Errorf("withoutFormat(%q, %d dots) = %q; want %q", c.path, c.dots, got, c.want)
		}
	}
	for path, dot := range map[string]bool{"/a/./b": true, "/a/..": true, "/%2e%2e/b": true, "/a%2F..%2Fb": true, `/a\..\b`: true,
		"/a/.. /b": true, "/a/.b": false, "/a/b..": false, "/a/...": false} {
		if got := hasDotSegment(path); got != dot {
			t.Errorf("hasDotSegment(%q) = %v; want %v", path, got, dot)
		}
	}
}

// FuzzCanonPath: canonPath never panics, is idempotent (canonPath of its
// own result is that result, under either reading of encoded slashes),
// and its result is a path ServeMux takes as it is: it begins with a
// slash, has no empty segment, no trailing slash, no ';' and no dot
// segment (under its own reading of encoded slashes), and decodes to a
// path whose escaped form it is.
func FuzzCanonPath(f *testing.F) {
	for _, p := range []string{"/v1/orders", "/V1/Orders/", "/v1/orders;v=1", "/v1/orders%20", "/v1/orders.", "/a/../b", "/%2e%2e",
		"/a%2Fb", `/a\b`, "/caf%C3%A9", "/%ff", "/%zz", "", "//", "/a/%2F/", "/İ", "/ǅ", "/%E2%84%AA"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		for _, split := range []bool{false, true} {
			c := canonPath(p, split)
			if again := canonPath(c, split); again != c {
				t.Fatalf("canonPath(%q, %v) = %q, and canonPath of that = %q", p, split, c, again)
			}
			dot := false
			segments(c, split, func(seg string) { dot = dot || seg == "." || seg == ".." })
			if !strings.HasPrefix(c, "/") || strings.Contains(c, "//") || (c != "/" && strings.HasSuffix(c, "/")) ||
				strings.ContainsRune(c, ';') || dot {
				t.Fatalf("canonPath(%q, %v) = %q: not a canonical path", p, split, c)
			}
			decoded, err := url.PathUnescape(c)
			if err != nil {
				t.Fatalf("canonPath(%q, %v) = %q does not decode: %v", p, split, c, err)
			}
			if u := (url.URL{Path: decoded, RawPath: c}); u.EscapedPath() != c {
				t.Fatalf("canonPath(%q, %v) = %q: a URL takes it for %q", p, split, c, u.EscapedPath())
			}
		}
	})
}
