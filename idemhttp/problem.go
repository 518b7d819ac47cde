package idemhttp

import (
	"encoding/json"
	"net/http"
)

// ProblemTypeBase starts the `type` URI of every problem response; the code
// follows it as the fragment. docs/problems.md describes each code.
const ProblemTypeBase = "https://github.com/idemkit/idem/blob/main/docs/problems.md#"

// The stable, machine-readable codes of the problem responses the
// middleware writes. Clients branch on the code, never on the detail text.
const (
	CodeKeyRequired      = "key_required"      // 400: the endpoint requires an Idempotency-Key header (Options.RequireKey) and the request has none
	CodeKeyInvalid       = "key_invalid"       // 400: the key is empty, too long, has bad characters, or was sent twice
	CodeTenantInvalid    = "tenant_invalid"    // 400: the tenant could not be derived from the request
	CodeTenantMissing    = "tenant_missing"    // 400: the request carries none of the credentials keys are scoped by
	CodeBodyUnreadable   = "body_unreadable"   // 400: reading the request body failed
	CodeBodyTooLarge     = "body_too_large"    // 413: the body is over Options.MaxBody
	CodeKeyInFlight      = "key_in_flight"     // 409: another request with the key is running; see Retry-After
	CodeKeyMismatch      = "key_mismatch"      // 422: the key was used for a different request
	CodeNotReplayable    = "not_replayable"    // 422: the key's request ran, but its response cannot be replayed
	CodeStoreUnavailable = "store_unavailable" // 503: the idempotency store failed; the handler did not run
	CodeStoreFull        = "store_full"        // 503: a bounded store has no room for a new key; the handler did not run
	CodeInternal         = "internal"          // 500: a misconfiguration, e.g. a Fingerprint function returning bad output
	CodeOutcomeUnknown   = "outcome_unknown"   // 503: an earlier request with the key may have taken effect, its result is unknown; see Retry-After
	CodeLeaseLost        = "lease_lost"        // 503: the lease ended before the handler ran (it did not run), or while it ran
	CodeKeyExpired       = "key_expired"       // 410: the key's request ran; its response is no longer kept, the key still is (KeyRetention)
)

var problemTitles = map[string]string{
	CodeKeyRequired:      "Idempotency-Key header required",
	CodeKeyInvalid:       "Invalid Idempotency-Key header",
	CodeTenantInvalid:    "Invalid tenant",
	CodeTenantMissing:    "Tenant credentials required",
	CodeBodyUnreadable:   "Request body could not be read",
	CodeBodyTooLarge:     "Request body too large",
	CodeKeyInFlight:      "A request with this Idempotency-Key is in progress",
	CodeKeyMismatch:      "Idempotency-Key reused with a different request",
	CodeNotReplayable:    "The response of this Idempotency-Key cannot be replayed",
	CodeStoreUnavailable: "Idempotency store unavailable",
	CodeStoreFull:        "Idempotency store full",
	CodeInternal:         "Internal error",
	CodeOutcomeUnknown:   "The outcome of the request with this Idempotency-Key is unknown",
	CodeLeaseLost:        "The idempotency lease ended",
	CodeFirstSentStale:   "Repeatability-First-Sent is older than keys are kept",
	CodeKeyExpired:       "The request with this Idempotency-Key ran; its response is no longer kept",
}

// Problem is the body of a problem response (RFC 9457) with the extension
// member `code`.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
	// CompletedAt and OriginalStatus are set on key_expired: when the
	// key's request completed (RFC 3339, UTC) and the status it answered.
	CompletedAt    string `json:"completed_at,omitempty"`
	OriginalStatus int    `json:"original_status,omitempty"`
}

// WriteProblem answers with an application/problem+json body for code, the
// title that belongs to it (the status text for codes of its caller's own)
// and detail, marked Cache-Control: no-store so no cache keeps an error in
// place of the real answer. Headers set before the call (Retry-After) are
// kept.
func WriteProblem(w http.ResponseWriter, status int, code, detail string) {
	writeProblem(w, Problem{Status: status, Code: code, Detail: detail})
}

// writeProblem writes p, its type and title filled in from its code.
func writeProblem(w http.ResponseWriter, p Problem) {
	status, code := p.Status, p.Code
	title, ok := problemTitles[code]
	if !ok {
		title = http.StatusText(status)
	}
	p.Type, p.Title = ProblemTypeBase+code, title
	body, _ := json.Marshal(p)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
