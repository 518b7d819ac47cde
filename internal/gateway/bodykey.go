package gateway

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/httpwire"
	"github.com/idemkit/idem/internal/jsonptr"
)

// keySource wraps next, the route's middleware, with the route's key
// source: the Idempotency-Key header (nothing to do) or a JSON body field.
func (rt Route) keySource(next http.Handler, o idemhttp.Options) (http.Handler, error) {
	spec, ok := strings.CutPrefix(rt.KeyFrom, "json:")
	switch {
	case rt.KeyFrom == "" || rt.KeyFrom == "header":
		return next, nil
	case !ok:
		return nil, fmt.Errorf("%q: want header, or json: and a JSON Pointer (json:/request_id)", rt.KeyFrom)
	}
	ptr, err := jsonptr.Parse(spec)
	if err == nil && len(ptr) == 0 {
		err = errors.New(`json: needs a pointer to a field, e.g. json:/request_id`)
	}
	if err != nil {
		return nil, err
	}
	maxBody := cmp.Or(o.MaxBody, defaultMaxBody)
	return &bodyKey{next: next, ptr: ptr, methods: o.Methods, required: o.RequireKey, maxBody: maxBody, format: o.ErrorFormat, onReject: o.OnOutcome}, nil
}

// bodyKey takes a protected request's key from a string field of its JSON
// body and hands the request on with that key as its Idempotency-Key
// header. From there the key is one value everywhere, as a header key is:
// the middleware validates it by the same rule (1 to 255 printable ASCII
// characters, no space at either end), and the store, the upstream (which
// gets it in Idempotency-Key, the body untouched), the reconcile lookup,
// the logs and the admin API all see the same bytes.
//
// A request that also sends the header must send the same key; one that
// sends only the header keeps it (so a client, or a route switched from
// the header to a field, is not cut off); one with neither is a request
// without a key. The body is read once, bounded by MaxBody: nothing is
// allocated past what the client may send anyway.
type bodyKey struct {
	next     http.Handler
	ptr      jsonptr.Pointer
	methods  []string
	required bool
	maxBody  int64
	format   idemhttp.ErrorFormat
	onReject func(*http.Request, idemhttp.Outcome)
}

func (b *bodyKey) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !slices.Contains(b.methods, r.Method) {
		b.next.ServeHTTP(w, r)
		return
	}
	body, ok := b.readBody(w, r)
	if !ok {
		return
	}
	r.Body = httpwire.NewBody(body) // sent upstream in one write (sendInOneWrite), whether the middleware keys it or not
	key, found, err := b.field(body)
	_, hasHeader := r.Header[idemhttp.HeaderKey]
	switch {
	case err != nil:
		b.reject(w, r, http.StatusBadRequest, idemhttp.CodeKeyInvalid, "the body field "+b.ptr.String()+" "+err.Error())
		return
	case !found && !hasHeader && b.required:
		b.reject(w, r, http.StatusBadRequest, idemhttp.CodeKeyRequired,
			"this endpoint requires an idempotency key: the string field "+b.ptr.String()+" of a JSON body, or an Idempotency-Key header")
		return
	case found && hasHeader:
		if h, err := idemhttp.KeyFromHeader(r.Header); err == nil && h != key {
			b.reject(w, r, http.StatusBadRequest, idemhttp.CodeKeyInvalid,
				"the Idempotency-Key header and the body field "+b.ptr.String()+" name different keys: send one, or the same in both")
			return
		} // a bad header: the middleware answers key_invalid
	case found:
		r.Header[idemhttp.HeaderKey] = []string{headerForm(key)}
	}
	b.next.ServeHTTP(w, r)
}

// field returns the key in the body field, validated and in the one form a
// key has, and whether the body has the field. A field that is not a
// string, or not a valid key, or that the body names twice on its path
// (readers disagree on which counts), or in another case (Request_Id for
// request_id: readers disagree on whether it counts), is an error.
//
// The body is read whatever its Content-Type (none, text/plain, text/json,
// a list): many upstreams decode it as JSON regardless. A body that is
// not valid JSON has no key, unless a lenient reader could still read it
// as JSON, and so perhaps find a key (lenientJSON): then it is an error.
func (b *bodyKey) field(body []byte) (string, bool, error) {
	if !json.Valid(body) {
		if why := lenientJSON(body); why != "" {
			return "", false, errors.New("cannot be read: the body is not one valid JSON document, but JSON readers that allow " + why +
				" would read it, and may find a key in it the gateway does not: send the body as valid JSON alone")
		}
		return "", false, nil
	}
	raw, found, err := jsonptr.Lookup(body, b.ptr)
	switch {
	case errors.Is(err, jsonptr.ErrDuplicate):
		return "", false, errors.New("is named more than once on its path: which one counts is ambiguous")
	case errors.Is(err, jsonptr.ErrCase):
		return "", false, errors.New("is named in another case on its path (" + strings.TrimPrefix(err.Error(), jsonptr.ErrCase.Error()+": ") +
			"): readers that match names without case take it for the field, others do not")
	case err != nil || !found:
		return "", false, err
	case raw[0] != '"':
		return "", false, errors.New("must be a JSON string")
	}
	var s string
	json.Unmarshal(raw, &s) // valid; a lone surrogate or bad UTF-8 turns into U+FFFD, which the key rule refuses
	key, err := idemhttp.KeyFromHeader(http.Header{idemhttp.HeaderKey: {quote(s)}})
	if err != nil {
		return "", false, fmt.Errorf("is not a valid key: %w", err)
	}
	return key, true, nil
}

// lenientJSON says what a reader more lenient than the JSON grammar
// would allow to read body, which is not valid JSON, as a document: a
// byte order mark (Express's body-parser, System.Text.Json), data after
// the first value (Go's json.Decoder, Jackson), or, in a body that begins
// as an object or an array (after white space, NULs and byte order
// marks), comments, trailing commas, NaN, single quotes, another encoding
// (UTF-16, UTF-32)... (Json.NET, JSON5, Python's json, Jackson's
// features); such a body that no reader takes (truncated) is refused as
// well, the safe side. It returns "" for a body no JSON reader takes for
// a document: a form, plain text.
func lenientJSON(body []byte) string {
	rest := body
	for len(rest) > 0 && (rest[0] <= ' ' || rest[0] == 0xEF || rest[0] == 0xBB || rest[0] == 0xBF || rest[0] == 0xFE || rest[0] == 0xFF) {
		rest = rest[1:]
	}
	if len(rest) > 0 && (rest[0] == '{' || rest[0] == '[' || rest[0] == '/') {
		return "a byte order mark, data after the value, comments, trailing commas or another encoding"
	}
	d := json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(body, []byte("\uFEFF"))))
	if d.Decode(new(json.RawMessage)) == nil {
		return "a byte order mark or data after the first value"
	}
	return ""
}

// headerForm writes key as an Idempotency-Key value that KeyFromHeader
// reads back as key: bare (as Stripe's clients send keys), or quoted
// (RFC 9651) when it holds a comma or a double quote.
func headerForm(key string) string {
	if !strings.ContainsAny(key, `,"`) {
		return key
	}
	return quote(key)
}

var quoteEscapes = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

// quote writes s as an RFC 9651 string, leaving every other byte as it is
// for KeyFromHeader to judge.
func quote(s string) string { return `"` + quoteEscapes.Replace(s) + `"` }

// defaultMaxBody is the body limit where idemhttp.Options.MaxBody is
// zero: idemhttp's default.
const defaultMaxBody = 1 << 20

// readBody reads the whole body, up to maxBody, answering the request
// itself (413, 400) when it cannot, as the middleware would.
func (b *bodyKey) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, status, code, detail := readLimited(w, r, b.maxBody)
	if status != 0 {
		b.reject(w, r, status, code, detail)
		return nil, false
	}
	return body, true
}

// readLimited reads r's whole body, up to maxBody; when it cannot, the
// status (413, 400), problem code and detail to answer with.
func readLimited(w http.ResponseWriter, r *http.Request, maxBody int64) (body []byte, status int, code, detail string) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0, "", ""
	}
	tooLarge := "the request body is over the limit of " + strconv.FormatInt(maxBody, 10) + " bytes"
	if r.ContentLength > maxBody {
		return nil, http.StatusRequestEntityTooLarge, idemhttp.CodeBodyTooLarge, tooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if _, over := errors.AsType[*http.MaxBytesError](err); over {
		return nil, http.StatusRequestEntityTooLarge, idemhttp.CodeBodyTooLarge, tooLarge
	}
	if err != nil {
		return nil, http.StatusBadRequest, idemhttp.CodeBodyUnreadable, "reading the request body: " + err.Error()
	}
	return body, 0, "", ""
}

func (b *bodyKey) reject(w http.ResponseWriter, r *http.Request, status int, code, detail string) {
	b.format.WriteError(w, status, code, detail)
	b.onReject(r, idemhttp.OutcomeRejected)
}
