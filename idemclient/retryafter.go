package idemclient

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// parseRetryAfter reads a Retry-After value (RFC 9110 section 10.2.3):
// either a number of seconds or an HTTP date, read against now. A date in
// the past means no wait. ok is false for an absent or malformed value,
// which the caller then ignores.
func parseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil && !isRange(err) {
			return 0, false
		}
		if secs > math.MaxInt64/uint64(time.Second) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
