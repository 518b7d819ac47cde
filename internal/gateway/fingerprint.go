package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/jsonptr"
)

// FingerprintRule says which part of a JSON body a route's fingerprint
// covers: all of it (both lists empty), Only the fields named, or all but
// the Ignore'd ones (a request_id or a timestamp a client changes on every
// retry). Each entry is a JSON Pointer (RFC 6901). The method, path, query
// and content type always count. A body that is not JSON, not valid, or
// that names a member on a pointer's path twice or in another case is
// fingerprinted whole.
type FingerprintRule struct {
	Only   []string `yaml:"only"`   // JSON Pointers of the only members the fingerprint covers
	Ignore []string `yaml:"ignore"` // JSON Pointers of the members the fingerprint leaves out
}

func (f FingerprintRule) isWhole() bool { return f.Only == nil && f.Ignore == nil }

// compile returns the fingerprint function of the rule.
func (f FingerprintRule) compile() (func(*http.Request, []byte) string, error) {
	if f.isWhole() {
		return idemhttp.Fingerprint, nil
	}
	if f.Only != nil && f.Ignore != nil {
		return nil, errors.New("set only or ignore, not both")
	}
	field, list := "only", f.Only
	if f.Ignore != nil {
		field, list = "ignore", f.Ignore
	}
	if len(list) == 0 {
		return nil, &FieldError{Path: field, Err: errors.New("an empty list: leave fingerprint out to cover the whole body")}
	}
	ptrs := make([]jsonptr.Pointer, len(list))
	seen := map[string]bool{}
	for i, s := range list {
		p, err := jsonptr.Parse(s)
		if err == nil && len(p) == 0 {
			err = errors.New(`"" names the whole body`)
		}
		if err == nil && seen[p.String()] {
			err = fmt.Errorf("%q is listed twice", s)
		}
		if err != nil {
			return nil, &FieldError{Path: fmt.Sprintf("%s[%d]", field, i), Err: err}
		}
		seen[p.String()], ptrs[i] = true, p
	}
	transform := onlyFields
	if f.Ignore != nil {
		transform = withoutFields
	}
	return func(r *http.Request, body []byte) string {
		if isJSONBody(r, body) {
			if t, err := transform(body, ptrs); err == nil {
				return idemhttp.Fingerprint(r, t)
			}
		}
		return idemhttp.Fingerprint(r, body)
	}, nil
}

// onlyFields returns the object that maps each pointer found in doc to
// its value as written, for idemhttp.Fingerprint to canonicalise. A
// pointer that finds nothing is left out, so a missing field and a null
// one differ.
func onlyFields(doc []byte, ptrs []jsonptr.Pointer) ([]byte, error) {
	out := []byte{'{'}
	for _, p := range ptrs {
		v, found, err := jsonptr.Lookup(doc, p)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		name, _ := json.Marshal(p.String())
		out = append(append(append(out, name...), ':'), v...)
	}
	return append(out, '}'), nil
}

// withoutFields returns doc without the values the pointers name.
func withoutFields(doc []byte, ptrs []jsonptr.Pointer) ([]byte, error) {
	for _, p := range ptrs {
		var err error
		if doc, err = jsonptr.Remove(doc, p); err != nil {
			return nil, err
		}
	}
	return doc, nil
}

// isJSONBody reports whether r declares a JSON body (application/json or
// a +json type) and body is valid JSON.
func isJSONBody(r *http.Request, body []byte) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && isJSONType(mt) && json.Valid(body)
}

// isJSONType reports whether the media type mt is JSON: application/json
// or a +json type.
func isJSONType(mt string) bool { return mt == "application/json" || strings.HasSuffix(mt, "+json") }
