package idemhttp

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// ErrorFormat is the shape of the error answers the middleware writes.
type ErrorFormat uint8

const (
	// ErrorFormatProblem writes application/problem+json (RFC 9457) with
	// the member `code`: see WriteProblem. It is the zero value.
	ErrorFormatProblem ErrorFormat = iota
	// ErrorFormatStripe writes the error object of Stripe's API,
	// {"error":{"type":...,"code":...,"message":...,"doc_url":...}}, with
	// the statuses and the retry headers Stripe's SDKs act on, so that
	// they raise a typed error (stripe-go: *stripe.Error) and retry only
	// what may be retried: see WriteStripeError and docs/problems.md.
	ErrorFormatStripe
)

// String returns the format's flag value: "problem" or "stripe".
func (f ErrorFormat) String() string {
	switch f {
	case ErrorFormatProblem:
		return "problem"
	case ErrorFormatStripe:
		return "stripe"
	}
	return fmt.Sprintf("ErrorFormat(%d)", uint8(f))
}

// ParseErrorFormat returns the format named "problem" or "stripe".
func ParseErrorFormat(s string) (ErrorFormat, error) {
	switch s {
	case "problem":
		return ErrorFormatProblem, nil
	case "stripe":
		return ErrorFormatStripe, nil
	}
	return 0, fmt.Errorf("idemhttp: error format %q: want problem or stripe", s)
}

// MismatchStatus is the status of a key_mismatch answer in the format:
// 422 Unprocessable Content for problem (the IETF draft), 400 for stripe
// (what Stripe answers).
func (f ErrorFormat) MismatchStatus() int {
	if f == ErrorFormatStripe {
		return http.StatusBadRequest
	}
	return http.StatusUnprocessableEntity
}

// WriteError answers with code in format f: WriteProblem or
// WriteStripeError.
func (f ErrorFormat) WriteError(w http.ResponseWriter, status int, code, detail string) {
	if f == ErrorFormatStripe {
		WriteStripeError(w, status, code, detail)
		return
	}
	WriteProblem(w, status, code, detail)
}

// The `type` members of Stripe's error object.
const (
	stripeTypeIdempotency    = "idempotency_error"
	stripeTypeInvalidRequest = "invalid_request_error"
	stripeTypeAPI            = "api_error"
)

// stripeLockTimeout is the `code` of a stripe-format answer to a request
// whose key is in flight (key_in_flight). stripe-go v82 retries an error
// with a Stripe-shaped body only when it is a 429 with this code: a
// Stripe-shaped 409 or 5xx it hands to the application at once, whatever
// Stripe-Should-Retry says (stripe.go shouldRetry, error.go canRetry).
const stripeLockTimeout = "lock_timeout"

// stripeShape is how one of idem's codes looks in the stripe format.
type stripeShape struct {
	typ    string
	status int    // 0: the status the caller gave
	code   string // "": idem's code
	retry  bool   // Stripe-Should-Retry
}

// stripeShapes map the codes idem writes (the middleware's and the
// gateway's) to Stripe's error object; docs/problems.md has the table.
var stripeShapes = map[string]stripeShape{
	CodeKeyRequired:        {typ: stripeTypeInvalidRequest},
	CodeKeyInvalid:         {typ: stripeTypeInvalidRequest},
	CodeTenantInvalid:      {typ: stripeTypeInvalidRequest},
	CodeTenantMissing:      {typ: stripeTypeInvalidRequest},
	CodeBodyUnreadable:     {typ: stripeTypeInvalidRequest, retry: true},
	CodeBodyTooLarge:       {typ: stripeTypeInvalidRequest},
	CodeKeyInFlight:        {typ: stripeTypeIdempotency, status: http.StatusTooManyRequests, code: stripeLockTimeout, retry: true},
	CodeKeyMismatch:        {typ: stripeTypeIdempotency},
	CodeNotReplayable:      {typ: stripeTypeIdempotency, status: http.StatusBadRequest},
	CodeStoreUnavailable:   {typ: stripeTypeAPI, retry: true},
	CodeStoreFull:          {typ: stripeTypeAPI, retry: true},
	CodeInternal:           {typ: stripeTypeAPI},
	CodeOutcomeUnknown:     {typ: stripeTypeAPI, retry: true},
	CodeLeaseLost:          {typ: stripeTypeAPI, retry: true},
	CodeFirstSentStale:     {typ: stripeTypeIdempotency},
	CodeKeyExpired:         {typ: stripeTypeIdempotency},
	"upstream_unreachable": {typ: stripeTypeAPI, retry: true},
	"upstream_no_response": {typ: stripeTypeAPI, retry: true},
	"upstream_timeout":     {typ: stripeTypeAPI, retry: true},
	"hop_by_hop_header":    {typ: stripeTypeInvalidRequest},
}

// StripeError is the body of a stripe-format error answer.
type StripeError struct {
	Error StripeErrorObject `json:"error"`
}

// StripeErrorObject is Stripe's error object. IdemCode is idem's code
// (the Code constants) even where Code is Stripe's own (lock_timeout).
type StripeErrorObject struct {
	Type     string `json:"type"`
	Code     string `json:"code"`
	Message  string `json:"message"`
	DocURL   string `json:"doc_url"`
	IdemCode string `json:"idem_code"`
	// CompletedAt and OriginalStatus are set on key_expired, as in Problem.
	CompletedAt    string `json:"completed_at,omitempty"`
	OriginalStatus int    `json:"original_status,omitempty"`
}

// WriteStripeError answers with Stripe's error object for idem's code:
// the type, status and Stripe-Should-Retry header docs/problems.md lists
// for it (a code it does not list gets invalid_request_error for a 4xx,
// api_error otherwise, and the status given). message is detail, or the
// code's title; doc_url links the code's section of docs/problems.md.
// Headers set before the call (Retry-After) are kept, and Cache-Control
// is no-store.
func WriteStripeError(w http.ResponseWriter, status int, code, detail string) {
	writeStripeError(w, status, code, detail, StripeErrorObject{})
}

// writeStripeError writes the error object for code, with the members of
// ext that only some codes have (CompletedAt, OriginalStatus).
func writeStripeError(w http.ResponseWriter, status int, code, detail string, ext StripeErrorObject) {
	s, ok := stripeShapes[code]
	if !ok {
		s = stripeShape{typ: stripeTypeAPI, retry: status >= 500}
		if status < 500 {
			s.typ = stripeTypeInvalidRequest
		}
	}
	if s.status != 0 {
		status = s.status
	}
	stripeCode := s.code
	if stripeCode == "" {
		stripeCode = code
	}
	msg := detail
	if msg == "" {
		if msg = problemTitles[code]; msg == "" {
			msg = http.StatusText(status)
		}
	}
	ext.Type, ext.Code, ext.Message, ext.DocURL, ext.IdemCode = s.typ, stripeCode, msg, ProblemTypeBase+code, code
	body, _ := json.Marshal(StripeError{ext})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Stripe-Should-Retry", fmt.Sprint(s.retry))
	h.Del("Content-Length")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
