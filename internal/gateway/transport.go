package gateway

import (
	"net/http"
	"strings"
)

// neverResend keeps http.Transport from sending a request twice.
//
// The Transport resends a request that failed on a reused keep-alive
// connection when it counts the request as replayable, and it counts every
// request without a body (or with GetBody) that carries an Idempotency-Key
// or X-Idempotency-Key header as replayable. An upstream that read the
// request and then closed the connection may have acted on it, so the
// resend could run it twice, behind the gateway's back. The Transport looks
// the headers up under their canonical names only; sending them under
// lower-case names hides them from that rule and changes nothing on the
// wire, where header names are case-insensitive (HTTP/2 sends them lower
// case anyway). A request that never left (nothing written) is still
// retried: that retry is safe.
type neverResend struct{ http.RoundTripper }

var resendHeaders = []string{"Idempotency-Key", "X-Idempotency-Key"}

func (t neverResend) RoundTrip(r *http.Request) (*http.Response, error) {
	if (r.Body == nil || r.Body == http.NoBody || r.GetBody != nil) && !safeMethod(r.Method) {
		var h http.Header
		for _, name := range resendHeaders {
			if vs, ok := r.Header[name]; ok {
				if h == nil {
					h = r.Header.Clone()
				}
				delete(h, name)
				h[strings.ToLower(name)] = vs
			}
		}
		if h != nil {
			r = r.WithContext(r.Context()) // a shallow copy: the caller's request stays as it was
			r.Header = h
		}
	}
	return t.RoundTripper.RoundTrip(r)
}

// safeMethod reports whether the Transport resends requests of this method
// whatever their headers: the methods RFC 9110 calls safe.
func safeMethod(m string) bool {
	switch m {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}
