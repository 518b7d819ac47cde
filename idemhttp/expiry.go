package idemhttp

import (
	"strconv"
	"time"
)

// HeaderExpiry publishes the server's expiry policy on every answer to a
// keyed request, as the IETF draft asks servers to: how long a response is
// replayed, and how long its key is remembered, in seconds:
//
//	Idempotency-Expiry: response=86400, key=2592000
//
// A retry within `response` gets the stored response; after it and within
// `key` it gets 410 key_expired and does not run; after both it runs as a
// new request. Without key retention the two are equal.
const HeaderExpiry = "Idempotency-Expiry"

// expiryValue is the value of HeaderExpiry for the retention of responses
// and of keys; a key is never kept shorter than its response.
func expiryValue(response, key time.Duration) string {
	key = max(key, response)
	return "response=" + strconv.FormatInt(int64(response/time.Second), 10) +
		", key=" + strconv.FormatInt(int64(key/time.Second), 10)
}
