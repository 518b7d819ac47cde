// Package jsonptr finds and removes the value a JSON Pointer (RFC 6901)
// names in a JSON document, working on the document's bytes: what it
// returns keeps every string, number and member name as written, so that
// a fingerprint made from it tells apart what the client's bytes tell
// apart. The gateway takes an idempotency key from a body field with it,
// and fingerprints a body by chosen fields or without some.
package jsonptr

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Pointer is a parsed JSON Pointer: its reference tokens, unescaped. The
// empty Pointer names the whole document.
type Pointer []string

// Parse parses a JSON Pointer: "" (the whole document) or "/" followed by
// reference tokens separated by "/", in which "~1" stands for "/" and "~0"
// for "~".
func Parse(s string) (Pointer, error) {
	if s == "" {
		return Pointer{}, nil
	}
	if s[0] != '/' {
		return nil, fmt.Errorf("jsonptr: %q does not start with /", s)
	}
	tokens := strings.Split(s[1:], "/")
	for i, t := range tokens {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, fmt.Errorf("jsonptr: %q: ~ must be followed by 0 or 1 (~0 is ~, ~1 is /)", s)
			}
		}
		tokens[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(t)
	}
	return tokens, nil
}

// String writes p back in its escaped form.
func (p Pointer) String() string {
	var b strings.Builder
	for _, t := range p {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	return b.String()
}

// ErrDuplicate is returned when an object on the pointer's path holds the
// member the pointer goes through more than once: readers disagree on
// which one counts (the first, the last, an error), so none is taken.
var ErrDuplicate = errors.New("jsonptr: the member is named more than once")

// ErrCase is returned when an object on the pointer's path holds a member
// whose name is the pointer's token in another case (Request_Id for
// request_id): readers that match names without case (Go's encoding/json
// into a struct, System.Text.Json under ASP.NET Core's web defaults,
// Json.NET, Jackson with ACCEPT_CASE_INSENSITIVE_PROPERTIES) take it for
// the member, the others do not, so none is taken.
var ErrCase = errors.New("jsonptr: a member is named in another case")

// Lookup returns the value p names in doc, as written (without the white
// space around it), and whether there is one. doc must be a document that
// json.Valid accepts.
func Lookup(doc []byte, p Pointer) (value []byte, found bool, err error) {
	v := trim(doc)
	for _, token := range p {
		s, ok, err := child(v, token)
		if err != nil || !ok {
			return nil, false, err
		}
		v = v[s.start:s.end]
	}
	return v, true, nil
}

// Remove returns doc without the member or array element p names, or doc
// itself when p names none. doc must be a document that json.Valid
// accepts; what Remove returns is one too, and keeps every other member
// and element as written.
func Remove(doc []byte, p Pointer) ([]byte, error) {
	if len(p) == 0 {
		return nil, errors.New("jsonptr: the empty pointer names the whole document, which cannot be removed")
	}
	return remove(trim(doc), p)
}

func remove(v []byte, p Pointer) ([]byte, error) {
	s, ok, err := child(v, p[0])
	if err != nil || !ok {
		return v, err
	}
	var repl []byte
	if len(p) > 1 {
		if repl, err = remove(v[s.start:s.end], p[1:]); err != nil {
			return nil, err
		}
	}
	// The container again, from its own bytes: the member (with the comma
	// that separated it) left out, or its value replaced.
	out := make([]byte, 0, len(v))
	out = append(out, v[0])
	first := true
	for _, item := range items(v) {
		switch {
		case item.start != s.start:
			out = appendItem(out, &first, v[item.from:item.end])
		case repl != nil:
			out = appendItem(out, &first, append(v[item.from:item.start:item.start], repl...))
		}
	}
	return append(out, v[len(v)-1]), nil
}

func appendItem(out []byte, first *bool, item []byte) []byte {
	if !*first {
		out = append(out, ',')
	}
	*first = false
	return append(out, item...)
}

// span is one member of an object or element of an array: from is where
// it begins (its name, for a member), start and end bound its value.
type span struct{ from, start, end int }

// child returns the value of the member or element token names in v, and
// whether there is one.
func child(v []byte, token string) (span, bool, error) {
	if len(v) == 0 {
		return span{}, false, nil
	}
	switch v[0] {
	case '{':
		var found span
		n, other := 0, ""
		for _, m := range items(v) {
			switch name := memberName(v[m.from:m.start]); {
			case name == token:
				found, n = m, n+1
			case foldEqual(name, token):
				other = name
			}
		}
		switch {
		case n > 1:
			return span{}, false, fmt.Errorf("%w: %q", ErrDuplicate, token)
		case other != "":
			return span{}, false, fmt.Errorf("%w: %q for %q", ErrCase, other, token)
		}
		return found, n == 1, nil
	case '[':
		i, err := strconv.Atoi(token)
		if err != nil || i < 0 || strconv.Itoa(i) != token { // RFC 6901: no sign, no leading zero; "-" names no element
			return span{}, false, nil
		}
		if es := items(v); i < len(es) {
			return es[i], true, nil
		}
	}
	return span{}, false, nil
}

// foldEqual reports whether a and b are one name to a reader that
// matches names without case: by Unicode case folding, or as Go's
// encoding/json folds a name (each rune lowered, then uppered, so that
// "İ" and "ı" are "I").
func foldEqual(a, b string) bool {
	return strings.EqualFold(a, b) || fold(a) == fold(b)
}

func fold(s string) string {
	return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, s)
}

// memberName decodes the name of a member, given the bytes from its
// opening quote to its value.
func memberName(b []byte) string {
	end := stringEnd(b, 0)
	raw := b[:end]
	if !strings.Contains(string(raw), `\`) {
		return string(raw[1 : len(raw)-1])
	}
	var name string
	json.Unmarshal(raw, &name) // valid: the document is
	return name
}

// Members yields the name (its string literal as written, quotes
// included) and the value (as written) of each member of doc, in order,
// when doc is an object, and nothing otherwise. doc must be a document
// that json.Valid accepts. It allocates nothing.
func Members(doc []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func(name, value []byte) bool) {
		v := trim(doc)
		if len(v) == 0 || v[0] != '{' {
			return
		}
		for i := space(v, 1); i < len(v) && v[i] == '"'; {
			end := stringEnd(v, i)
			start := space(v, space(v, end)+1) // past the colon
			vend := valueEnd(v, start)
			if !yield(v[i:end], v[start:vend]) {
				return
			}
			if i = space(v, vend); i >= len(v) || v[i] != ',' {
				return
			}
			i = space(v, i+1)
		}
	}
}

// AppendString appends to dst the string that the string literal lit
// (quotes included, as json.Valid accepts it) stands for, its escapes
// decoded as encoding/json decodes them (a lone surrogate is U+FFFD).
func AppendString(dst, lit []byte) []byte {
	lit = lit[1 : len(lit)-1]
	for i := 0; i < len(lit); i++ {
		if lit[i] != '\\' {
			dst = append(dst, lit[i])
			continue
		}
		i++
		switch lit[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(lit[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := unicode.ReplacementChar
				if i+6 < len(lit) && lit[i+1] == '\\' && lit[i+2] == 'u' {
					r2 = utf16.DecodeRune(r, hex4(lit[i+3:i+7]))
				}
				if r = r2; r != unicode.ReplacementChar {
					i += 6
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // " \ /
			dst = append(dst, lit[i])
		}
	}
	return dst
}

// hex4 is the value of four hexadecimal digits.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// items returns the members of the object, or the elements of the array, v.
func items(v []byte) []span {
	var out []span
	i := space(v, 1)
	if v[i] == '}' || v[i] == ']' {
		return nil
	}
	for i < len(v) {
		from := i
		if v[0] == '{' {
			i = space(v, stringEnd(v, i))
			i = space(v, i+1) // the colon
		}
		start := i
		i = valueEnd(v, i)
		out = append(out, span{from: from, start: start, end: i})
		i = space(v, i)
		if i >= len(v) || v[i] != ',' {
			break
		}
		i = space(v, i+1)
	}
	return out
}

func trim(b []byte) []byte {
	i, j := space(b, 0), len(b)
	for j > i && isSpace(b[j-1]) {
		j--
	}
	return b[i:j]
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func space(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// stringEnd returns the index after the string literal that starts at i.
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// valueEnd returns the index after the value that starts at i.
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) && !isSpace(b[i]) && b[i] != ',' && b[i] != ']' && b[i] != '}' {
		i++
	}
	return i
}
