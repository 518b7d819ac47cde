package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
)

// The header names of the protocol.
const (
	HeaderKey      = "Idempotency-Key"     // the client's key for one logical request
	HeaderReplayed = "Idempotent-Replayed" // "true" on a replayed response (Stripe's marker)
)

// Errors of KeyFromHeader.
var (
	// ErrNoKey is returned by KeyFromHeader when the request has no
	// Idempotency-Key header.
	ErrNoKey = errors.New("idemhttp: no Idempotency-Key header")
	// ErrBadKey is returned by KeyFromHeader, with the reason, when the
	// Idempotency-Key header is present but unusable: sent more than once,
	// or not a key of 1 to 255 printable ASCII characters.
	ErrBadKey = errors.New("idemhttp: invalid Idempotency-Key header")
)

// KeyFromHeader returns the idempotency key of a request. The header must
// appear once and hold either a Structured Field string, as the IETF draft
// writes it (`"8e03978e-40d5"`, with \" and \\ escapes), or a bare value as
// Stripe's clients send it (8e03978e-40d5). Either form gives 1 to 255
// printable ASCII characters; a bare value may not hold a comma or a
// double quote, which is how two keys that a proxy folded into one line
// show up. Leading and trailing spaces and tabs around the value are
// ignored; a quoted key may not begin or end with a space, which would not
// survive as a header value (parsers trim it) when the key is forwarded.
// The key returned is the one form the key has everywhere: in the store,
// forwarded upstream by idem serve, in its reconcile lookup, its logs and
// its admin API.
func KeyFromHeader(h http.Header) (string, error) {
	vs := h[HeaderKey]
	switch {
	case len(vs) == 0:
		return "", ErrNoKey
	case len(vs) > 1:
		return "", fmt.Errorf("%w: the header appears %d times", ErrBadKey, len(vs))
	}
	v := strings.Trim(vs[0], " \t")
	if len(v) > 2*idem.MaxKeyLength+2 { // longer than any quoted key can be
		return "", fmt.Errorf("%w: %d bytes, the limit is %d", ErrBadKey, len(v), idem.MaxKeyLength)
	}
	var key string
	if strings.HasPrefix(v, `"`) {
		var err error
		if key, err = parseQuoted(v); err != nil {
			return "", err
		}
	} else {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '"' {
				return "", fmt.Errorf("%w: character %q at byte %d (quote the key to send a comma)", ErrBadKey, c, i)
			}
		}
		key = v
	}
	if err := idem.ValidateKey(key); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	if strings.Trim(key, " ") != key {
		return "", fmt.Errorf("%w: the key begins or ends with a space, which would not survive as a header value", ErrBadKey)
	}
	return key, nil
}

// parseQuoted decodes an RFC 9651 string: printable ASCII between double
// quotes, with \" and \\ the only escapes, and nothing after the end quote.
func parseQuoted(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", fmt.Errorf("%w: bad escape at byte %d", ErrBadKey, i)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", fmt.Errorf("%w: characters after the closing quote", ErrBadKey)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w: character %q at byte %d", ErrBadKey, c, i)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("%w: no closing quote", ErrBadKey)
}
