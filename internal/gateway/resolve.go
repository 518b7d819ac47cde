package gateway

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/httpwire"
	"github.com/idemkit/idem/store"
)

// The codes of the admin API's answers about UNKNOWN keys.
const (
	CodeListInvalid     = "list_invalid"      // 400 (admin API): GET /v1/keys without state=unknown, or a bad limit
	CodeCursorInvalid   = "cursor_invalid"    // 400 (admin API): GET /v1/keys with an after= that is not a next of this listing
	CodeResolveInvalid  = "resolve_invalid"   // 400 (admin API): a resolution that is not valid JSON of the documented form
	CodeResolveTooLarge = "resolve_too_large" // 413 (admin API): a resolution whose body is over --max-response, or whose JSON is over twice that
	CodeKeyNotUnknown   = "key_not_unknown"   // 409 (admin API): a resolution for a key that is not UNKNOWN; nothing changed
	CodeStaleFence      = "stale_fence"       // 409 (admin API): a resolution whose fence is not the UNKNOWN record's; nothing changed
)

// resolveLimit bounds the JSON of a resolution whose body is at most
// maxBody bytes: twice that (a JSON text that escapes every other byte,
// or base64), and 64 KiB for the rest. A body that needs more escapes
// goes as body_base64.
func resolveLimit(maxBody int) int64 { return 2*int64(maxBody) + 64<<10 }

// KeyPage is the answer of GET /v1/keys?state=unknown.
type KeyPage struct {
	Keys []RecordView `json:"keys"`
	Next string       `json:"next,omitempty"` // pass as ?after= for the next page; empty on the last
}

// Resolution is the body of POST /v1/keys/{tenant}/{key}/resolve: an
// operator's word on an UNKNOWN key.
type Resolution struct {
	Fence int64 `json:"fence"` // the UNKNOWN record's fence (GET the key first)
	// Outcome is "completed" (the request took effect: Status, Header and
	// Body are recorded and replayed) or "not_executed" (it did not: the
	// key is released and the next request runs it).
	Outcome    string      `json:"outcome"`
	Status     int         `json:"status,omitempty"`
	Header     http.Header `json:"header,omitempty"`
	Body       *string     `json:"body,omitempty"`        // the body as text
	BodyBase64 *string     `json:"body_base64,omitempty"` // or as base64, for bytes that are not text
	Reason     string      `json:"reason,omitempty"`      // why, for the audit (at most 1 KiB)
}

// serveList answers GET /v1/keys?state=unknown: a page of UNKNOWN keys.
func (g *Gateway) serveList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("state") != "unknown" {
		idemhttp.WriteProblem(w, http.StatusBadRequest, CodeListInvalid, "only UNKNOWN keys are listed: add state=unknown")
		return
	}
	p := store.ListParams{After: q.Get("after"), AllTenants: !q.Has("tenant"), Tenant: ParseTenant(q.Get("tenant"))}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxListLimit {
			idemhttp.WriteProblem(w, http.StatusBadRequest, CodeListInvalid, fmt.Sprintf("limit must be a number from 1 to %d", store.MaxListLimit))
			return
		}
		p.Limit = n
	}
	page, err := g.engine.ListUnknown(r.Context(), p)
	if err != nil {
		keyError(w, err)
		return
	}
	out := KeyPage{Keys: make([]RecordView, 0, len(page.Records)), Next: page.Next}
	for _, rec := range page.Records {
		out.Keys = append(out.Keys, ViewRecord(rec))
	}
	writeJSON(w, out)
}

// serveResolve answers POST /v1/keys/{tenant}/{key}/resolve. A
// resolution records a body of at most --max-response bytes.
func (g *Gateway) serveResolve(w http.ResponseWriter, r *http.Request, audit *AuditRecord) {
	maxBody := g.cfg.MaxResponse
	var res Resolution
	if err := decodeJSON(w, r, resolveLimit(maxBody), &res, false); err != nil {
		resolutionError(w, err, maxBody)
		return
	}
	if err := checkReason(res.Reason); err != nil {
		idemhttp.WriteProblem(w, http.StatusBadRequest, CodeResolveInvalid, err.Error())
		return
	}
	audit.Reason = res.Reason
	result, err := res.Result()
	if err != nil {
		idemhttp.WriteProblem(w, http.StatusBadRequest, CodeResolveInvalid, err.Error())
		return
	}
	audit.Resolution = res.Outcome // checked: completed or not_executed
	if result != nil && len(result.Body) > maxBody {
		resolutionError(w, &http.MaxBytesError{Limit: int64(maxBody)}, maxBody)
		return
	}
	if err := g.engine.Resolve(r.Context(), pathID(r), res.Fence, result); err != nil {
		resolveError(w, err)
		return
	}
	audit.Outcome = res.Outcome
	w.WriteHeader(http.StatusNoContent)
}

// decodeJSON reads into v the one JSON object of an admin call's body,
// and nothing after it but white space, from at most limit bytes; an
// empty body leaves v as it is when optional.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, optional bool) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if optional && err == io.EOF {
			return nil
		}
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the JSON object")
		}
		return err
	}
	return nil
}

// resolutionError answers a resolution that could not be read: 413 when
// it is too large, else 400.
func resolutionError(w http.ResponseWriter, err error, maxBody int) {
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		idemhttp.WriteProblem(w, http.StatusRequestEntityTooLarge, CodeResolveTooLarge, fmt.Sprintf(
			"a resolution records a body of at most %d bytes (--max-response), in JSON of at most %d bytes; nothing was changed",
			maxBody, resolveLimit(maxBody)))
		return
	}
	idemhttp.WriteProblem(w, http.StatusBadRequest, CodeResolveInvalid, "the resolution is not valid JSON of the documented form: "+err.Error())
}

// Result checks the resolution and returns the result to record: nil for
// not_executed.
func (res Resolution) Result() (*store.Result, error) {
	if res.Fence < 1 {
		return nil, errors.New("fence must be the UNKNOWN record's fence, a positive number")
	}
	switch res.Outcome {
	case "not_executed":
		if res.Status != 0 || res.Header != nil || res.Body != nil || res.BodyBase64 != nil {
			return nil, errors.New("a not_executed resolution has no status, header or body")
		}
		return nil, nil
	case "completed":
	default:
		return nil, fmt.Errorf("outcome %q: want completed or not_executed", res.Outcome)
	}
	if res.Status < 200 || res.Status > 599 {
		return nil, fmt.Errorf("status %d: want 200..599", res.Status)
	}
	for name, vs := range res.Header {
		if !httpwire.ValidToken(name) {
			return nil, fmt.Errorf("header name %q is not a valid token", name)
		}
		for _, v := range vs {
			if strings.ContainsAny(v, "\r\n\x00") {
				return nil, fmt.Errorf("header %q has a control character in its value", name)
			}
		}
	}
	out := &store.Result{Status: res.Status, Header: http.Header{}}
	for name, vs := range res.Header {
		out.Header[http.CanonicalHeaderKey(name)] = vs
	}
	switch {
	case res.Body != nil && res.BodyBase64 != nil:
		return nil, errors.New("give body or body_base64, not both")
	case res.Body != nil:
		out.Body = []byte(*res.Body)
	case res.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*res.BodyBase64)
		if err != nil {
			return nil, fmt.Errorf("body_base64: %w", err)
		}
		out.Body = b
	}
	return out, nil
}

func resolveError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, idem.ErrNotUnknown):
		idemhttp.WriteProblem(w, http.StatusConflict, CodeKeyNotUnknown, "the key is not UNKNOWN; nothing was changed")
	case errors.Is(err, idem.ErrStaleFence):
		idemhttp.WriteProblem(w, http.StatusConflict, CodeStaleFence, "the fence is not the UNKNOWN record's (another attempt's?); nothing was changed")
	case errors.Is(err, idem.ErrResultTooLarge):
		idemhttp.WriteProblem(w, http.StatusBadRequest, CodeResolveInvalid, err.Error())
	default:
		keyError(w, err)
	}
}
