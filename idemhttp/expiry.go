package idemhttp

import (
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem/store"
)

// HeaderExpiry publishes the server's expiry policy on every answer to a
// keyed request, as the IETF draft asks servers to: how long a response is
// replayed, and how long its key is remembered, in seconds:
//
//	Idempotency-Expiry: response=86400, key=2592000
//
// A retry within `response` gets the stored response; after it and within
// `key` it gets 410 key_expired and does not run; after both it runs as a
// new request. Without key retention the two are equal. Neither applies to
// a key whose outcome is unknown (UNKNOWN, or PROCESSING whose lease
// ended): it is kept until settled (resolved, or completed by its owner),
// however long, and never runs again before.
const HeaderExpiry = "Idempotency-Expiry"

// expiryValue is the value of HeaderExpiry for the retention of responses
// and of keys; a key is never kept shorter than its response.
func expiryValue(response, key time.Duration) string {
	key = max(key, response)
	return "response=" + strconv.FormatInt(int64(response/time.Second), 10) +
		", key=" + strconv.FormatInt(int64(key/time.Second), 10)
}

// answerExpired answers a retry that met a tombstone: the request ran, its
// response's retention ended and its key's did not. 410 Gone, not run
// again, with when it completed and the status it answered, in either
// error format.
func (m *middleware) answerExpired(w http.ResponseWriter, rec store.Record) {
	completed := rec.CompletedAt.UTC().Format(time.RFC3339)
	var status int
	if rec.Result != nil {
		status = rec.Result.Status
	}
	detail := "the request with this key ran (completed " + completed + ", status " + strconv.Itoa(status) +
		") and its response is no longer kept; it will not run again: use a new key for a new request"
	if m.format == ErrorFormatStripe {
		writeStripeError(w, http.StatusGone, CodeKeyExpired, detail, StripeErrorObject{CompletedAt: completed, OriginalStatus: status})
		return
	}
	writeProblem(w, Problem{Status: http.StatusGone, Code: CodeKeyExpired, Detail: detail, CompletedAt: completed, OriginalStatus: status})
}
