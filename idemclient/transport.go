package idemclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem"
)

// Transport sends requests that may have side effects, and tells, of one
// that failed without a response, whether any byte of it may have reached
// the server: Sent. A request that provably never left did not run; but
// the work that sent it may have had effects before it (an earlier call),
// so its error is not marked idem.NotRun: returned from Engine.Do's work,
// as any unmarked error, it keeps the key UNKNOWN. Work whose one effect
// is this request says so itself:
//
//	if !idemclient.Sent(err) {
//		return nil, idem.NotRun(err) // nothing left: the next call runs the work
//	}
//
// The idem gateway forwards every request through one.
//
// It also refuses to send a request whose context carries an idem lease
// that has ended (the context of a handler under idemhttp or idemgrpc, of
// the function of Engine.Do): its error wraps the lease's
// (idem.ErrLeaseExpired, idem.ErrLeaseLost) and Sent is false for it. And
// it keeps net/http from resending a request by itself: http.Transport
// resends a request without a body that carries an Idempotency-Key when a
// reused connection breaks, and the server may have acted on the first
// copy; the header goes out under its lower-case name (the same on the
// wire, and HTTP/2 sends it so anyway), which that rule does not see.
// That rule is HTTP/1's: Go's HTTP/2 transport resends, whatever the
// headers, a request the server refused unprocessed (REFUSED_STREAM, a
// GOAWAY below the stream) and one it reset with PROTOCOL_ERROR.
type Transport struct {
	// Base sends the requests. Nil means http.DefaultTransport. Sent says
	// false only when Base is an *http.Transport, whose httptrace hooks
	// tell what it wrote; with any other Base every failed request counts
	// as sent: never a release on a guess.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	// A redirect's request (http.Client sets its Response) follows one
	// that reached a server: whatever becomes of it, the request may have
	// run there.
	redirected := r.Response != nil
	in := r // the request as the caller knows it, for the response
	if l, ok := idem.LeaseFromContext(r.Context()); ok {
		if err := l.Check(); err != nil {
			return nil, &sendError{sent: redirected, err: fmt.Errorf("idemclient: not sent, the lease ended first: %w", err)}
		}
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	_, traced := base.(*http.Transport)
	h := noResendHeader(r)
	var w *writeWatch
	if traced {
		w = new(writeWatch)
		ctx := httptrace.WithClientTrace(r.Context(), w.hooks())
		r = r.WithContext(ctx) // a shallow copy: the caller's request stays as it was
	} else if h != nil {
		r = r.WithContext(r.Context())
	}
	if h != nil {
		r.Header = h
	}
	resp, err := base.RoundTrip(r)
	if err != nil {
		return nil, &sendError{sent: !traced || redirected || w.mayHaveReached(r, err), err: err}
	}
	// Not the copy with the key under its lower-case name, which
	// Header.Get does not find: a caller reads the key it was sent with in
	// resp.Request (Retrying's answer when its attempts run out).
	resp.Request = in
	return resp, nil
}

// Sent reports whether the request that failed with err may have reached
// the server, and so may have run: false only when a Transport saw that no
// byte of it was sent (a refused dial, a DNS or TLS failure, an ended
// lease). Any other error, one that no Transport classified or a response
// body cut in the middle, counts as sent, and so does an error of an
// unknown outcome (ErrOutcomeUnknown: Retrying's after several attempts,
// of which an earlier one may have reached the server whatever the last
// did).
func Sent(err error) bool {
	if errors.Is(err, ErrOutcomeUnknown) {
		return true
	}
	if se, ok := errors.AsType[*sendError](err); ok {
		return se.sent
	}
	return true
}

// sendError is the error of a request Transport got no response to.
type sendError struct {
	sent bool // any byte of the request may have reached the server
	err  error
}

func (e *sendError) Error() string {
	if e.sent {
		return e.err.Error()
	}
	return e.err.Error() + " (nothing was sent)"
}

func (e *sendError) Unwrap() error { return e.err }

// writeWatch records, for one request, what the transport did with it.
// A transport that retries on a fresh connection calls the hooks again;
// what they record only ever grows, so the verdict stays on the safe side.
type writeWatch struct {
	gotConn atomic.Bool // the transport had a connection for the request
	wrote   atomic.Bool // the transport started writing the request's header
	trace   httptrace.ClientTrace
}

// hooks returns the hooks that watch the transport write the request, in
// w itself (one allocation with the record, not one per hook struct).
func (w *writeWatch) hooks() *httptrace.ClientTrace {
	wrote := func() { w.wrote.Store(true) }
	w.trace = httptrace.ClientTrace{
		GotConn:          func(httptrace.GotConnInfo) { w.gotConn.Store(true) },
		WroteHeaderField: func(string, []string) { wrote() },
		WroteHeaders:     wrote,
		WroteRequest:     func(httptrace.WroteRequestInfo) { wrote() },
	}
	return &w.trace
}

// writeBufferSize is the size of the buffer net/http writes a request
// into before the first byte goes to the connection (Transport's
// WriteBufferSize default), minus room for " HTTP/1.1\r\n".
const writeBufferSize = 4<<10 - 16

// mayHaveReached reports whether any byte of r, which failed with err,
// may have reached the server. Before its first header field the HTTP/1
// transport has written only the request line, into the connection's
// write buffer: nothing reaches the socket until the buffer is flushed or
// overflows. So a request never sent a byte when no connection was had
// (refused dial, DNS failure, TLS handshake failure, dial timeout), or
// when an HTTP/1 connection was had but the header was not begun and the
// request line fits the buffer, and the hooks have had their say: the
// HTTP/2 transport returns on the context's end without waiting for the
// goroutine that writes the request, which may yet write it (and call the
// hooks) after the verdict: after a context's end, a connection had is a
// request that may have left.
func (w *writeWatch) mayHaveReached(r *http.Request, err error) bool {
	switch {
	case w.wrote.Load():
		return true
	case !w.gotConn.Load():
		return false
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || r.Context().Err() != nil ||
		len(r.Method)+len(r.URL.RequestURI()) >= writeBufferSize
}

// resendHeaders are the headers under which http.Transport counts a
// request as safe to resend.
var resendHeaders = []string{"Idempotency-Key", "X-Idempotency-Key"}

// noResendHeader returns r's header with resendHeaders under their
// lower-case names, or nil when r needs no change: http.Transport resends
// a request that failed on a reused keep-alive connection when it counts
// it replayable, which is every request without a body (or with GetBody)
// that carries one of those headers under its canonical name. An upstream
// that read the request and then closed the connection may have acted on
// it. A request that never left (nothing written) is still retried: that
// retry is safe.
func noResendHeader(r *http.Request) http.Header {
	if (r.Body != nil && r.Body != http.NoBody && r.GetBody == nil) || safeMethod(r.Method) {
		return nil
	}
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
	return h
}

// safeMethod reports whether http.Transport resends requests of this
// method whatever their headers: the methods RFC 9110 calls safe.
func safeMethod(m string) bool {
	switch m {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}
