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
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/idemkit/idem/internal/httpwire"
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
//
// A form body (application/x-www-form-urlencoded) is hashed as its decoded
// name and value pairs, so that neither the order of distinct names nor
// the choice among equivalent encodings ("a b", "a+b", "a%20b"; "%2f" and
// "%2F"; "A" and "%41") changes the fingerprint. The order of the values
// of one name is kept (a[]=1&a[]=2 and a[]=2&a[]=1 differ), and so is the
// order of every name under one unindexed array (items[][x] and
// items[][y], which parsers group into objects by their order). "a" and
// "a=" differ; empty pairs ("&&") are ignored. A body with a bad escape
// is hashed as its bytes. docs/problems.md says what counts as the same
// request.
func Fingerprint(r *http.Request, body []byte) string {
	f := fingerprinters.Get().(*fingerprinter)
	defer f.release()
	ct := canonicalContentType(r.Header.Get("Content-Type"))
	b := f.buf[:0]
	b = httpwire.AppendField(b, r.Method)
	b = httpwire.AppendField(b, r.URL.EscapedPath())
	b = httpwire.AppendField(b, r.URL.RawQuery)
	b = httpwire.AppendField(b, ct)
	form, isCanonicalForm := []byte(nil), false
	if isForm(ct) {
		form, isCanonicalForm = appendCanonicalForm(nil, body)
	}
	if isCanonicalForm {
		b = append(b, 'f')
		b = binary.BigEndian.AppendUint64(b, uint64(len(form)))
		b = append(b, form...)
		f.h.Write(b)
	} else if isJSON(ct) && json.Valid(body) {
		// The canonical body goes after its tag and a length placeholder,
		// in the same buffer, so the whole input is hashed in one call.
		b = append(b, 'j')
		at := len(b)
		b = binary.BigEndian.AppendUint64(b, 0)
		b = f.canonical(b, body)
		binary.BigEndian.PutUint64(b[at:], uint64(len(b)-at-8))
		f.h.Write(b)
	} else {
		b = append(b, 'b')
		b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
		f.h.Write(b)
		f.h.Write(body) // not copied: it can be large
	}
	f.buf = b
	return f.hexSum()
}

// hexSum returns the hex digest of what was written to f.h.
func (f *fingerprinter) hexSum() string {
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], f.h.Sum(f.sum[:0]))
	return string(hexSum[:])
}

// A fingerprinter is the reusable state of one Fingerprint call: the hash,
// the bytes it hashes and the canonicaliser's stack of object members.
// Fingerprint runs on every protected request, and a fresh hash and
// buffers each time cost more than the hashing of a small body.
type fingerprinter struct {
	h       hash.Hash
	sum     [sha256.Size]byte
	buf     []byte
	members []member
	src     []byte // the JSON document being canonicalised
	i       int    // the canonicaliser's position in src
}

var fingerprinters = sync.Pool{New: func() any { return &fingerprinter{h: sha256.New()} }}

// maxPooledBuffer bounds the buffer a fingerprinter keeps for the next
// call, so that one large body does not pin its size in the pool.
const maxPooledBuffer = 64 << 10

func (f *fingerprinter) release() {
	f.h.Reset()
	f.src = nil
	if cap(f.buf) > maxPooledBuffer {
		f.buf = nil
	}
	if cap(f.members) > maxPooledBuffer/32 {
		f.members = nil
	}
	clear(f.members[:cap(f.members)]) // drop the references into the body
	fingerprinters.Put(f)
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

func isForm(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return mt == "application/x-www-form-urlencoded"
}

// formPair is one decoded name=value of a form body; group is the name up
// to its first "[]", which decides its place in the canonical order.
type formPair struct {
	group, name, value string
	eq                 bool // the pair had a '='
}

// appendCanonicalForm appends the canonical form of a urlencoded body to
// dst: its pairs decoded, stably sorted by group, each written with its
// length in front. It reports false when a pair does not decode.
func appendCanonicalForm(dst, body []byte) ([]byte, bool) {
	var pairs []formPair
	for p := range strings.SplitSeq(string(body), "&") {
		if p == "" {
			continue
		}
		rawName, rawValue, eq := strings.Cut(p, "=")
		name, err := url.QueryUnescape(rawName)
		if err != nil {
			return dst, false
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return dst, false
		}
		group := name
		if i := strings.Index(name, "[]"); i >= 0 {
			group = name[:i+2]
		}
		pairs = append(pairs, formPair{group: group, name: name, value: value, eq: eq})
	}
	slices.SortStableFunc(pairs, func(a, b formPair) int { return strings.Compare(a.group, b.group) })
	for _, p := range pairs {
		dst = httpwire.AppendField(dst, p.name)
		dst = httpwire.AppendField(dst, p.value)
		if p.eq {
			dst = append(dst, '=')
		} else {
			dst = append(dst, '-')
		}
	}
	return dst, true
}

// canonical appends the canonical form of the JSON document src, which
// json.Valid accepted, to dst. The bounds checks only keep it from
// panicking should that ever be wrong.
func (f *fingerprinter) canonical(dst, src []byte) []byte {
	f.src, f.i = src, 0
	return f.value(dst)
}

func (f *fingerprinter) space() {
	for f.i < len(f.src) {
		switch f.src[f.i] {
		case ' ', '\t', '\n', '\r':
			f.i++
		default:
			return
		}
	}
}

func (f *fingerprinter) value(dst []byte) []byte {
	f.space()
	if f.i >= len(f.src) {
		return dst
	}
	switch f.src[f.i] {
	case '{':
		return f.object(dst)
	case '[':
		return f.array(dst)
	case '"':
		return append(dst, f.str()...)
	}
	start := f.i // a number, true, false or null
	for f.i < len(f.src) && strings.IndexByte(" \t\n\r,]}", f.src[f.i]) < 0 {
		f.i++
	}
	return append(dst, f.src[start:f.i]...)
}

// str returns the string literal at f.i, quotes and escapes as written.
func (f *fingerprinter) str() []byte {
	start := f.i
	for f.i++; f.i < len(f.src); f.i++ {
		switch f.src[f.i] {
		case '\\':
			f.i++
		case '"':
			f.i++
			return f.src[start:f.i]
		}
	}
	return f.src[start:]
}

func (f *fingerprinter) array(dst []byte) []byte {
	f.i++ // [
	dst = append(dst, '[')
	f.space()
	if f.i < len(f.src) && f.src[f.i] == ']' {
		f.i++
		return append(dst, ']')
	}
	for f.i < len(f.src) {
		dst = f.value(dst)
		f.space()
		if f.i >= len(f.src) || f.src[f.i] != ',' {
			break
		}
		f.i++
		dst = append(dst, ',')
	}
	f.i++ // ]
	return append(dst, ']')
}

// A member is one `"key":value` of an object, written canonically at
// dst[start:end].
type member struct {
	key        []byte
	start, end int
}

// object writes the members of an object as they come, then, unless they
// already are in order, appends them again sorted and moves that over the
// first copy. f.members is a stack shared by the nested objects.
func (f *fingerprinter) object(dst []byte) []byte {
	f.i++ // {
	dst = append(dst, '{')
	f.space()
	if f.i < len(f.src) && f.src[f.i] == '}' {
		f.i++
		return append(dst, '}')
	}
	base := len(f.members)
	sorted := true
	for f.i < len(f.src) {
		f.space()
		start := len(dst)
		key := f.str()
		if n := len(f.members); n > base && bytes.Compare(f.members[n-1].key, key) > 0 {
			sorted = false
		}
		dst = append(dst, key...)
		f.space()
		f.i++ // :
		dst = append(dst, ':')
		dst = f.value(dst)
		f.members = append(f.members, member{key: key, start: start, end: len(dst)})
		f.space()
		if f.i >= len(f.src) || f.src[f.i] != ',' {
			break
		}
		f.i++
		dst = append(dst, ',')
	}
	f.i++ // }
	members := f.members[base:]
	f.members = f.members[:base]
	if !sorted {
		first, again := members[0].start, len(dst)
		// Stable: members with the same key keep their order, so
		// {"a":1,"a":2} and {"a":2,"a":1} stay apart.
		slices.SortStableFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
		for i, m := range members {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, dst[m.start:m.end]...)
		}
		dst = dst[:first+copy(dst[first:], dst[again:])]
	}
	return append(dst, '}')
}
