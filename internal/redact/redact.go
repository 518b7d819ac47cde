// Package redact hides the secrets of a URL before it reaches a log line,
// an error or a report: the gateway's upstream and reconcile URLs, the
// probe's target and the stores' URLs all go through URL. The rule is the
// same everywhere: never a password or a token, and everything else kept,
// so that an operator can still tell which server and which setting an
// error is about.
package redact

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode"
)

// Mask stands in for every secret that URL hides.
const Mask = "xxxxx"

// secretWords are the parts of a query parameter's name that say its
// value is a secret (password, sentinel_password, access_token, api_key,
// X-Amz-Signature, X-Goog-Signature, ...). A name is compared in lower
// case.
var secretWords = []string{"pass", "pwd", "token", "secret", "auth", "credential", "signature", "apikey", "api_key", "api-key", "access_key", "private"}

// secretNames are words that say a parameter's value is a secret when
// they stand as a whole word of its name (split at each character that
// is not a letter or a digit, and where a lower-case letter meets an
// upper-case one): too short to look for inside a name. code is Azure
// Functions' key (?code=), and OAuth's authorization code; key is a
// Google API key (?key=), subscription-key Azure API Management's, and
// sessionKey and the like; sig is an Azure SAS signature (?sig=), sign
// Alipay's and others'.
var secretNames = []string{"code", "key", "sig", "sign", "hmac", "jwt", "session"}

// URL returns s with its secrets replaced by Mask: the password of its
// user information (or a user given alone, which may be a token, as in
// https://TOKEN@host/), and the value of every query or fragment parameter
// whose name says it is a secret. It keeps the scheme, the user name
// beside a password, the host, the path and every other parameter, as
// written. s need not parse as a URL (url.Parse's own error would echo it
// whole): the user information is whatever stands between "://" and the
// last "@" before the first "/", "?" or "#", where RFC 3986 ends it.
func URL(s string) string {
	p := split(s)
	if p.hasUser {
		if user, _, ok := strings.Cut(p.userinfo, ":"); ok {
			p.userinfo = user + ":" + Mask
		} else {
			p.userinfo = Mask
		}
	}
	p.query = params(p.query, func(string) string { return Mask })
	p.fragment = params(p.fragment, func(string) string { return Mask })
	return p.String()
}

// Error is an error about a URL, which it quotes with its secrets hidden.
type Error struct {
	Kind error  // what is wrong, in general: a sentinel that Error wraps
	URL  string // the URL as written: Error() hides its secrets
	Why  string // the reason, holding no secret of URL
}

func (e *Error) Error() string { return fmt.Sprintf("%v %q: %s", e.Kind, URL(e.URL), e.Why) }
func (e *Error) Unwrap() error { return e.Kind }

// AsWritten returns err quoting uri, when err is an *Error (not one
// wrapped in another): for a layer that took its own options out of uri
// before another parsed the rest, so that a refusal quotes the URL its
// user wrote, not one they never saw.
func AsWritten(err error, uri string) error {
	if e, ok := err.(*Error); ok {
		c := *e
		c.URL = uri
		return &c
	}
	return err
}

// Secrets returns the secrets of s that URL hides, as written and
// unescaped, longest first, for scrubbing them from the text of an error
// that a client library built from s.
func Secrets(s string) []string {
	p := split(s)
	var out []string
	add := func(v string) {
		if v == "" {
			return
		}
		out = append(out, v)
		if u, err := url.PathUnescape(v); err == nil && u != v && u != "" {
			out = append(out, u)
		}
	}
	if p.hasUser {
		if _, pass, ok := strings.Cut(p.userinfo, ":"); ok {
			add(pass)
		} else {
			add(p.userinfo)
		}
	}
	collect := func(v string) string { add(v); return v }
	params(p.query, collect)
	params(p.fragment, collect)
	// Longest first: a secret that holds another is replaced whole.
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// parts are the pieces of a URL as written, separators excluded.
type parts struct {
	scheme            string // with "://", or "" when s has none
	hasUser           bool
	userinfo          string
	rest              string // host and path
	hasQuery, hasFrag bool
	query, fragment   string
}

func split(s string) parts {
	var p parts
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		p.scheme, s = scheme+"://", rest
		authority := s
		if i := strings.IndexAny(s, "/?#"); i >= 0 {
			authority = s[:i]
		}
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			p.hasUser, p.userinfo, s = true, authority[:at], s[at+1:]
		}
	}
	s, p.fragment, p.hasFrag = strings.Cut(s, "#")
	p.rest, p.query, p.hasQuery = strings.Cut(s, "?")
	return p
}

func (p parts) String() string {
	var b strings.Builder
	b.WriteString(p.scheme)
	if p.hasUser {
		b.WriteString(p.userinfo + "@")
	}
	b.WriteString(p.rest)
	if p.hasQuery {
		b.WriteString("?" + p.query)
	}
	if p.hasFrag {
		b.WriteString("#" + p.fragment)
	}
	return b.String()
}

// params returns the parameters of q (name=value, joined by "&") with
// f applied to the value of each one whose name says it is a secret.
func params(q string, f func(value string) string) string {
	if q == "" {
		return q
	}
	fields := strings.Split(q, "&")
	for i, field := range fields {
		name, value, ok := strings.Cut(field, "=")
		if ok && secretName(name) && !placeholder(value) {
			fields[i] = name + "=" + f(value)
		}
	}
	return strings.Join(fields, "&")
}

// placeholder reports whether a parameter's value is a template's
// placeholder ({key}, {tenant}, {fence} of a reconcile URL, written or
// escaped), which a request fills in: no secret, and the template's
// meaning, which a mask would hide.
func placeholder(value string) bool {
	if u, err := url.QueryUnescape(value); err == nil {
		value = u
	}
	name, ok := strings.CutPrefix(value, "{")
	name, closed := strings.CutSuffix(name, "}")
	return ok && closed && name != "" && !strings.ContainsFunc(name, func(r rune) bool { return r < 'a' || r > 'z' })
}

func secretName(name string) bool {
	if u, err := url.QueryUnescape(name); err == nil {
		name = u
	}
	lower := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	for _, w := range words(name) {
		if slices.Contains(secretNames, strings.ToLower(w)) {
			return true
		}
	}
	return false
}

// words are the words of a parameter's name: its runs of letters and
// digits, each split again where a lower-case letter or a digit meets an
// upper-case one (subscriptionKey: subscription, Key).
func words(name string) []string {
	var out []string
	start := -1
	var prev rune
	for i, r := range name {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			if start >= 0 {
				out = append(out, name[start:i])
			}
			start = -1
		case start < 0:
			start = i
		case unicode.IsUpper(r) && (unicode.IsLower(prev) || unicode.IsDigit(prev)):
			out = append(out, name[start:i])
			start = i
		}
		prev = r
	}
	if start >= 0 {
		out = append(out, name[start:])
	}
	return out
}
