package idemhttp

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	"mime"
	"net/http"
	"slices"
	"strings"
)

// Fingerprint is the default Options.Fingerprint: the hex SHA-256 of the
// method, the escaped path, the raw query, the content type (parsed and
// re-formatted, so "Application/JSON;charset=utf-8" and
// "application/json; charset=utf-8" agree) and the body.
//
// A JSON body (application/json or any +json type) is hashed in a canonical
// form: object members sorted by key and white space outside strings
// dropped, so a client that re-serialises the same object gets the same
// fingerprint. Strings and numbers are kept as written ("\u0041" and "A",
// 1.0 and 1 differ): no two different payloads are ever taken for the same.
// A body that is not valid JSON is hashed as its bytes, never rejected.
func Fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	ct := canonicalContentType(r.Header.Get("Content-Type"))
	writeField(h, r.Method)
	writeField(h, r.URL.EscapedPath())
	writeField(h, r.URL.RawQuery)
	writeField(h, ct)
	if isJSON(ct) {
		if canon, ok := canonicalJSON(body); ok {
			h.Write([]byte{'j'})
			writeField(h, canon)
			return hex.EncodeToString(h.Sum(nil))
		}
	}
	h.Write([]byte{'b'})
	writeField(h, body)
	return hex.EncodeToString(h.Sum(nil))
}

// writeField writes s with its length in front, so that no two different
// sequences of fields hash the same bytes.
func writeField[T string | []byte](h hash.Hash, s T) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

func canonicalContentType(ct string) string {
	if !strings.ContainsRune(ct, ';') { // no parameters: the common case, without parsing
		return strings.ToLower(strings.TrimSpace(ct))
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return ct // hashed as sent
	}
	return mime.FormatMediaType(mt, params)
}

func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// canonicalJSON returns body with object members sorted by their key as
// written and white space outside strings removed, or false when body is
// not valid JSON (including invalid UTF-8).
func canonicalJSON(body []byte) ([]byte, bool) {
	if !json.Valid(body) {
		return nil, false
	}
	c := canonicaliser{src: body}
	return c.value(make([]byte, 0, len(body))), true
}

// canonicaliser walks a document that json.Valid accepted; the bounds checks
// only keep it from panicking should that ever be wrong.
type canonicaliser struct {
	src []byte
	i   int
}

func (c *canonicaliser) space() {
	for c.i < len(c.src) {
		switch c.src[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

func (c *canonicaliser) value(dst []byte) []byte {
	c.space()
	if c.i >= len(c.src) {
		return dst
	}
	switch c.src[c.i] {
	case '{':
		return c.object(dst)
	case '[':
		return c.array(dst)
	case '"':
		return append(dst, c.str()...)
	}
	start := c.i // a number, true, false or null
	for c.i < len(c.src) && strings.IndexByte(" \t\n\r,]}", c.src[c.i]) < 0 {
		c.i++
	}
	return append(dst, c.src[start:c.i]...)
}

// str returns the string literal at c.i, quotes and escapes as written.
func (c *canonicaliser) str() []byte {
	start := c.i
	for c.i++; c.i < len(c.src); c.i++ {
		switch c.src[c.i] {
		case '\\':
			c.i++
		case '"':
			c.i++
			return c.src[start:c.i]
		}
	}
	return c.src[start:]
}

func (c *canonicaliser) array(dst []byte) []byte {
	c.i++ // [
	dst = append(dst, '[')
	c.space()
	if c.i < len(c.src) && c.src[c.i] == ']' {
		c.i++
		return append(dst, ']')
	}
	for c.i < len(c.src) {
		dst = c.value(dst)
		c.space()
		if c.i >= len(c.src) || c.src[c.i] != ',' {
			break
		}
		c.i++
		dst = append(dst, ',')
	}
	c.i++ // ]
	return append(dst, ']')
}

type member struct {
	key        []byte
	start, end int // the canonical value in the object's scratch buffer
}

func (c *canonicaliser) object(dst []byte) []byte {
	c.i++ // {
	c.space()
	if c.i < len(c.src) && c.src[c.i] == '}' {
		c.i++
		return append(dst, "{}"...)
	}
	var members []member
	var scratch []byte
	for c.i < len(c.src) {
		c.space()
		key := c.str()
		c.space()
		c.i++ // :
		start := len(scratch)
		scratch = c.value(scratch)
		members = append(members, member{key: key, start: start, end: len(scratch)})
		c.space()
		if c.i >= len(c.src) || c.src[c.i] != ',' {
			break
		}
		c.i++
	}
	c.i++ // }
	// Stable: members with the same key keep their order, so
	// {"a":1,"a":2} and {"a":2,"a":1} stay apart.
	slices.SortStableFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, m.key...)
		dst = append(dst, ':')
		dst = append(dst, scratch[m.start:m.end]...)
	}
	return append(dst, '}')
}
