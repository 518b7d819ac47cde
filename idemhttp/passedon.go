package idemhttp

import (
	"encoding/json"
	"net/http"
	"strings"
)

// stripeKeyInUse is the code of Stripe's own answer to a request whose
// key is running there: 409, {"error":{"code":"idempotency_key_in_use"}}.
const stripeKeyInUse = "idempotency_key_in_use"

// maxPassedOnBody bounds the body read for passedOnInFlight: idem's and
// Stripe's answers are a few hundred bytes, and a larger body is the
// application's own, not parsed.
const maxPassedOnBody = 4 << 10

// passedOnInFlight returns the reason to keep with the key when the
// handler answered with a downstream idempotent service's "this key is
// running" (a gateway's upstream, or a service the handler called and
// whose answer it passed on): idem's 409 key_in_flight problem, idem's
// stripe-format equivalent (429 lock_timeout, idem_code key_in_flight),
// or Stripe's 409 idempotency_key_in_use. It returns "" for any other
// answer, a business 409 included. Such an answer says the downstream
// work is under way, not what came of it: stored, it would be replayed
// as final for the whole retention although that work may complete;
// released, a retry would run the handler again. The key turns UNKNOWN.
// Only the captured response is read: nothing more is buffered.
func passedOnInFlight(status int, c *capture) string {
	if status != http.StatusConflict && status != http.StatusTooManyRequests ||
		c.overflow || c.hijacked || len(c.body) == 0 || len(c.body) > maxPassedOnBody {
		return ""
	}
	var ct string
	if vs := c.header["Content-Type"]; len(vs) > 0 {
		ct, _, _ = strings.Cut(vs[0], ";")
		ct = strings.TrimSpace(ct)
	}
	var body struct {
		Code  string `json:"code"` // problem+json
		Error struct {
			Code     string `json:"code"`
			IdemCode string `json:"idem_code"`
		} `json:"error"` // Stripe's error object
	}
	switch {
	case status == http.StatusConflict && strings.EqualFold(ct, "application/problem+json"):
		if json.Unmarshal(c.body, &body) == nil && body.Code == CodeKeyInFlight {
			return "a downstream key was in flight (409 key_in_flight passed on)"
		}
	case strings.EqualFold(ct, "application/json"):
		if json.Unmarshal(c.body, &body) != nil {
			return ""
		}
		if status == http.StatusTooManyRequests && body.Error.IdemCode == CodeKeyInFlight {
			return "a downstream key was in flight (429 lock_timeout with idem_code key_in_flight passed on)"
		}
		if status == http.StatusConflict && body.Error.Code == stripeKeyInUse {
			return "a downstream key was in flight (409 idempotency_key_in_use passed on)"
		}
	}
	return ""
}
