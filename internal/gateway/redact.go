package gateway

import (
	"net/url"
	"strings"
)

// RedactURL returns s with the password of its user information replaced
// by "xxxxx", for logs and error messages. A string that does not parse as
// a URL loses everything between "://" and the last "@" before its path,
// since url.Parse's own error would echo it whole.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	} else {
		scheme += "://"
	}
	authority, path := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		authority = "xxxxx@" + authority[i+1:]
	}
	return scheme + authority + path
}
