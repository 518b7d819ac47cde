package idemhttp

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
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
// or Stripe's 409 idempotency_key_in_use, gzip-encoded or not. It
// returns "" for any other answer, a business 409 included. Such an
// answer says the downstream work is under way, not what came of it:
// stored, it would be replayed as final for the whole retention
// although that work may complete;
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
	problem := status == http.StatusConflict && strings.EqualFold(ct, "application/problem+json")
	if !problem && !strings.EqualFold(ct, "application/json") {
		return "" // no shape below: the body is not decoded
	}
	raw, ok := decodedBody(c)
	if !ok {
		return ""
	}
	var body struct {
		Code  string `json:"code"` // problem+json
		Error struct {
			Code     string `json:"code"`
			IdemCode string `json:"idem_code"`
		} `json:"error"` // Stripe's error object
	}
	if json.Unmarshal(raw, &body) != nil {
		return ""
	}
	switch {
	case problem && body.Code == CodeKeyInFlight:
		return "a downstream key was in flight (409 key_in_flight passed on)"
	case !problem && status == http.StatusTooManyRequests && body.Error.IdemCode == CodeKeyInFlight:
		return "a downstream key was in flight (429 lock_timeout with idem_code key_in_flight passed on)"
	case !problem && status == http.StatusConflict && body.Error.Code == stripeKeyInUse:
		return "a downstream key was in flight (409 idempotency_key_in_use passed on)"
	}
	return ""
}

// decodedBody returns the captured body as its sender wrote it: undone
// from gzip (a compressing middleware, or an upstream asked for gzip by
// the client), at most maxPassedOnBody bytes of it. Any other encoding
// (br, deflate, zstd, or more than one) is not read, and ok is false: the
// answer keeps the status policy's word, as every answer that is not
// recognised does. Unread, a key in flight cannot be told from a business
// 409 (order_conflict); taking every such 409 for one would leave the
// business answers UNKNOWN, each waiting for an operator.
func decodedBody(c *capture) (b []byte, ok bool) {
	var enc string
	for _, v := range c.header["Content-Encoding"] {
		for _, e := range strings.Split(v, ",") {
			switch e = strings.TrimSpace(e); {
			case e == "" || strings.EqualFold(e, "identity"):
			case enc != "":
				return nil, false // two encodings: not undone
			default:
				enc = e
			}
		}
	}
	switch {
	case enc == "":
		return c.body, true
	case !strings.EqualFold(enc, "gzip") && !strings.EqualFold(enc, "x-gzip"):
		return nil, false
	}
	zr, err := gzip.NewReader(bytes.NewReader(c.body))
	if err != nil {
		return nil, false
	}
	b, err = io.ReadAll(io.LimitReader(zr, maxPassedOnBody+1))
	if err != nil || len(b) > maxPassedOnBody {
		return nil, false
	}
	return b, true
}
