package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idem/internal/httpwire"
	"github.com/idemkit/idem/internal/jsonptr"
)

// A method override is another reading of a request's method: Rails
// (Rack::MethodOverride), Spring (HiddenHttpMethodFilter), ASP.NET
// (UseHttpMethodOverride) and Express (method-override) turn a POST into
// the method that an X-HTTP-Method-Override header (or X-HTTP-Method,
// X-Method-Override) or a _method query parameter or form field names
// (Laravel: a top-level _method of a JSON object body too, which it
// takes for its input), so "POST /v1/orders/7" with
// "X-HTTP-Method-Override: PATCH" reaches the PATCH endpoint. The gateway
// forwards the request as written and cannot protect it as a PATCH (the route's middleware holds it to its own
// method), so a request whose override reading is protected other than
// its own reading is refused: 400 ambiguous_request. One whose override
// reading is protected by the same route, which protects its own method
// too, or is not protected at all, passes (a POST overridden to GET stays
// protected as a POST: over-protecting is the safe side). Any method's
// override counts, not only POST's (method-override can be told to).

// overrideHeaders are the override headers, in canonical form.
var overrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// overrideParam is the query parameter and form field, matched without case.
const overrideParam = "_method"

// overrides are the methods, in upper case and other than r's own, that r's
// override headers and query parameters name: every value, and every
// comma-separated part of one (Express takes the first, others the whole).
func overrides(r *http.Request) []string {
	var out []string
	add := func(v string) {
		for part := range strings.SplitSeq(v, ",") {
			if m := strings.ToUpper(strings.TrimSpace(part)); m != "" && m != r.Method && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	for _, h := range overrideHeaders {
		for _, v := range r.Header[h] {
			add(v)
		}
	}
	if q := r.URL.RawQuery; strings.ContainsAny(q, "_%") { // _method, or %5Fmethod
		for _, v := range overrideValues(q) {
			add(v)
		}
	}
	return out
}

// overrideValues are the values of the _method fields of a query or a
// form body, ';' taken for a separator too (as older Rack does).
func overrideValues(form string) []string {
	vals, _ := url.ParseQuery(strings.ReplaceAll(form, ";", "&")) // a bad pair is dropped, the others kept
	var out []string
	for k, v := range vals {
		if strings.EqualFold(k, overrideParam) {
			out = append(out, v...)
		}
	}
	return out
}

// escapes reports whether r, whose own reading leads to own, is protected
// otherwise when read as a request of method m: a route (or the top level)
// protects m there, and it is not own protecting r's own method.
func (t *routeTable) escapes(r *http.Request, own *routeEntry, m string) bool {
	c := *r
	c.Method = m
	e, err := t.route(&c)
	if err != nil {
		return true // the override reading is ambiguous itself
	}
	return e.protects(m) && !(e == own && own.protects(r.Method))
}

// checkOverride answers r itself (400 ambiguous_request, or the 413 or
// 400 of a body it cannot read) and returns false when an override
// reading of r is protected otherwise than r as written, which leads to
// own. A form or JSON body is read, up to the body limit, for a _method
// field only when some protected method would be such a reading.
func (t *routeTable) checkOverride(w http.ResponseWriter, r *http.Request, own *routeEntry) bool {
	methods := overrides(r)
	for _, m := range methods {
		if t.escapes(r, own, m) {
			t.refuseOverride(w, r, m)
			return false
		}
	}
	form, jsonBody := isFormPost(r), isJSONPost(r)
	if !form && !jsonBody {
		return true
	}
	escaping := t.escaping(r, own)
	if len(escaping) == 0 {
		return true
	}
	body, status, code, why := readLimited(w, r, t.maxBody)
	if status != 0 {
		if status == http.StatusRequestEntityTooLarge {
			why += " (a form or JSON body is read for a _method field)"
		}
		t.format.WriteError(w, status, code, why)
		t.reject(r)
		return false
	}
	r.Body = httpwire.NewBody(body)
	if jsonBody {
		if m := jsonOverride(body, escaping); m != "" {
			t.refuseOverride(w, r, m)
			return false
		}
		return true
	}
	for _, v := range formOverrides(r, body) {
		for part := range strings.SplitSeq(v, ",") {
			if m := strings.ToUpper(strings.TrimSpace(part)); m != "" && m != r.Method && t.escapes(r, own, m) {
				t.refuseOverride(w, r, m)
				return false
			}
		}
	}
	return true
}

func (t *routeTable) refuseOverride(w http.ResponseWriter, r *http.Request, m string) {
	t.format.WriteError(w, http.StatusBadRequest, CodeAmbiguousRequest, "the request overrides its method "+r.Method+" with "+m+
		" (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override or _method): servers that honour the override take it for a "+m+
		", which is protected otherwise than a "+r.Method+" to this path; send the "+m+" itself, without the override")
	t.reject(r)
}

// escaping are the protected methods that would be override readings of
// r protected otherwise than r.
func (t *routeTable) escaping(r *http.Request, own *routeEntry) []string {
	var out []string
	for m := range t.protected {
		if m != r.Method && t.escapes(r, own, m) {
			out = append(out, m)
		}
	}
	return out
}

// isFormPost reports whether r is a POST whose body frameworks read as a
// form: URL-encoded or multipart, or without a Content-Type (as Rack does).
func isFormPost(r *http.Request) bool {
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody {
		return false
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return true
	}
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data" || mt == ""
}

// isJSONPost reports whether r is a POST whose body Laravel reads as its
// input, _method included: a Content-Type that contains "/json" or
// "+json" (Request::isJson), text/json too, in any case.
func isJSONPost(r *http.Request) bool {
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody {
		return false
	}
	ct := strings.ToLower(r.Header.Get("Content-Type"))
	return strings.Contains(ct, "/json") || strings.Contains(ct, "+json")
}

// jsonOverride is the first of escaping that a top-level string member
// _method (matched without case, as the form field is) of the JSON object
// body names, whole or as a comma-separated part, or "". A body that is
// not a JSON object carries none. It allocates no more than the longest
// such name or value.
func jsonOverride(body []byte, escaping []string) string {
	if !json.Valid(body) {
		return ""
	}
	var buf []byte
	for name, v := range jsonptr.Members(body) {
		if v[0] != '"' || len(name) > 2+6*len(overrideParam) { // each byte of _method escaped as \uXXXX at most
			continue
		}
		if buf = jsonptr.AppendString(buf[:0], name); !bytes.EqualFold(buf, overrideParamBytes) {
			continue
		}
		buf = jsonptr.AppendString(buf[:0], v)
		for part := range bytes.SplitSeq(buf, []byte{','}) {
			for _, m := range escaping {
				if namesMethod(bytes.TrimSpace(part), m) {
					return m
				}
			}
		}
	}
	return ""
}

var overrideParamBytes = []byte(overrideParam)

// namesMethod reports whether part names the method m (in upper case) to
// a server that upper-cases it (strings.ToUpper, as the form field is
// read, or JavaScript's toUpperCase) or matches it without case.
func namesMethod(part []byte, m string) bool {
	if bytes.EqualFold(part, []byte(m)) {
		return true
	}
	i := 0
	for _, c := range string(part) {
		u := unicode.ToUpper(c)
		if u >= utf8.RuneSelf || i >= len(m) || m[i] != byte(u) {
			return false
		}
		i++
	}
	return i == len(m)
}

// formOverrides are the values of body's _method fields.
func formOverrides(r *http.Request, body []byte) []string {
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		return overrideValues(string(body))
	}
	var out []string
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	for {
		p, err := mr.NextPart()
		if err != nil {
			return out // the end, or a body no framework reads further either
		}
		if strings.EqualFold(p.FormName(), overrideParam) {
			v, _ := io.ReadAll(io.LimitReader(p, 256))
			out = append(out, string(v))
		}
	}
}
