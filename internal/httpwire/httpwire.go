// Package httpwire holds what idemhttp and the gateway must agree on byte
// for byte: the RFC 9110 token rule for method, header and cookie names,
// the methods protected with GET (WithHead), the credential tenant, the hex SHA-256 of the Authorization values
// (docs/reconcile.md documents it for upstreams), the headers every replay
// carries (a reconciled answer keeps the same ones), and the request body
// idemhttp read and the gateway sends on. A gateway with
// --tenant-from authorization must give every request the tenant that
// idemhttp's default gives it, or the keys an older gateway stored would
// no longer replay; with one function there is nothing to keep in step.
package httpwire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// ReplayedByDefault are the response headers every replay carries,
// whatever ReplayHeaders (--replay-headers) adds. Content-Encoding goes
// with the stored body, which is the bytes the client got: gzip from a
// compressing handler (or an upstream asked for gzip by the client) is
// replayed as gzip, labelled so.
var ReplayedByDefault = []string{"Content-Type", "Content-Encoding", "Location", "Content-Language", "Content-Disposition", "ETag"}

// ValidToken reports whether s is an RFC 9110 token, as method, header
// and cookie names are.
func ValidToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// WithHead is methods with HEAD added when they protect GET (read
// without case) and not HEAD: Go's ServeMux, Rails, Express, Spring and
// Django run a GET handler for a HEAD request, so a HEAD that passed
// unprotected would run the protected GET endpoint again under its key.
// It returns a new slice when it adds HEAD, methods itself otherwise.
func WithHead(methods []string) []string {
	get, head := false, false
	for _, m := range methods {
		get = get || strings.EqualFold(m, "GET")
		head = head || strings.EqualFold(m, "HEAD")
	}
	if !get || head {
		return methods
	}
	return append(methods[:len(methods):len(methods)], "HEAD")
}

// AppendField appends s with its length in front (8 bytes, big-endian),
// so that no two different sequences of fields hash the same bytes.
func AppendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// SumTenant returns the tenant of the hashed bytes b: their hex SHA-256.
func SumTenant(b []byte) string {
	sum := sha256.Sum256(b)
	var h [2 * sha256.Size]byte
	hex.Encode(h[:], sum[:])
	return string(h[:])
}

// CredentialTenant returns the tenant of the credentials vs (the values
// of the Authorization header, in order): the hex SHA-256 of each value
// with its length in front, or "" for none.
func CredentialTenant(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	var buf [256]byte // most credentials fit: no allocation but the result
	b := buf[:0]
	for _, v := range vs {
		b = AppendField(b, v)
	}
	return SumTenant(b)
}

// Body is a request body read into memory: idemhttp reads a protected
// request's body to fingerprint it and hands it on to the handler as a
// *Body, and the gateway, finding one, sends it upstream with its length
// known, in one write with the request's header (net/http writes the
// header of a body it cannot see into on its own first).
type Body struct{ bytes.Reader }

// NewBody returns b as a request body: in one allocation, where
// io.NopCloser(bytes.NewReader(b)) takes two.
func NewBody(b []byte) *Body {
	body := new(Body)
	body.Reset(b)
	return body
}

// Close does nothing: the server closes the request's own body.
func (*Body) Close() error { return nil }
