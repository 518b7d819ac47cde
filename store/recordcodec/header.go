package recordcodec

import (
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
)

// errBadHeader is returned for stored header bytes that do not decode.
var errBadHeader = errors.New("recordcodec: corrupt stored header")

// AppendHeader appends a compact, deterministic binary encoding of h to b,
// for stores that keep a Result's header as bytes: a count of names, then
// for each name in sorted order its length, the name, a count of values, and
// each value with its length (all lengths as uvarints). Nil and empty headers
// encode to nothing.
func AppendHeader(b []byte, h http.Header) []byte {
	if len(h) == 0 {
		return b
	}
	var stack [8]string // most headers have few names: sort them without an allocation
	names := stack[:0]
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = appendString(b, name)
		vs := h[name]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return b
}

// ParseHeader decodes what AppendHeader wrote. It never panics on corrupt
// input; it returns an error instead.
func ParseHeader(b []byte) (http.Header, error) {
	if len(b) == 0 {
		return nil, nil
	}
	n, b, err := uvarint(b)
	if err != nil || n > uint64(len(b)) {
		return nil, errBadHeader
	}
	h := make(http.Header, n)
	for range n {
		var name string
		if name, b, err = readString(b); err != nil {
			return nil, err
		}
		var nv uint64
		if nv, b, err = uvarint(b); err != nil || nv > uint64(len(b)) {
			return nil, errBadHeader
		}
		vs := make([]string, 0, nv)
		for range nv {
			var v string
			if v, b, err = readString(b); err != nil {
				return nil, err
			}
			vs = append(vs, v)
		}
		h[name] = vs
	}
	if len(b) != 0 {
		return nil, errBadHeader
	}
	return h, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func uvarint(b []byte) (uint64, []byte, error) {
	n, size := binary.Uvarint(b)
	if size <= 0 {
		return 0, nil, errBadHeader
	}
	return n, b[size:], nil
}

func readString(b []byte) (string, []byte, error) {
	n, b, err := uvarint(b)
	if err != nil || n > uint64(len(b)) {
		return "", nil, errBadHeader
	}
	return string(b[:n]), b[n:], nil
}
