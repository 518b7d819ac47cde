package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// The codes of the gateway's answers when the upstream call failed after
// the request may have reached the upstream.
const (
	// CodeUpstreamNoResponse (502): the request was sent, and no complete
	// response came back (reset, EOF): the key is UNKNOWN.
	CodeUpstreamNoResponse = "upstream_no_response"
)

// PreviousFenceHeader carries, on a request that took over a key whose
// previous attempt's lease ended (--takeover run), that attempt's fence:
// its work may have run, and the upstream can look it up.
const PreviousFenceHeader = "Idempotency-Previous-Fence"

// upstreamCall records, for one forwarded request, whether any byte of it
// may have reached the upstream: that decides whether a failed call may
// be retried (nothing was sent) or its outcome is unknown.
type upstreamCall struct {
	gotConn atomic.Bool // the transport had a connection for the request
	wrote   atomic.Bool // the transport started writing the request's header
	trace   httptrace.ClientTrace
}

type upstreamCallKey struct{}

// errNotForwarded is the error of a request the gateway refused to send:
// its lease had ended by the time it was about to go.
var errNotForwarded = errors.New("gateway: not forwarded: the lease ended first")

// errShutdown ends the upstream calls still running when the shutdown
// timeout ends.
var errShutdown = errors.New("gateway: shut down with the request in flight")

// hooks returns the hooks that watch the transport write the request, in
// c itself (one allocation with the record, not one per hook struct). A
// transport that retries on a fresh connection calls them again; what
// they record only ever grows, so the verdict stays on the safe side.
func (c *upstreamCall) hooks() *httptrace.ClientTrace {
	wrote := func() { c.wrote.Store(true) }
	c.trace = httptrace.ClientTrace{
		GotConn:          func(httptrace.GotConnInfo) { c.gotConn.Store(true) },
		WroteHeaderField: func(string, []string) { wrote() },
		WroteHeaders:     wrote,
		WroteRequest:     func(httptrace.WroteRequestInfo) { wrote() },
	}
	return &c.trace
}

// writeBufferSize is the size of the buffer net/http writes a request
// into before the first byte goes to the connection (Transport's
// WriteBufferSize default), minus room for " HTTP/1.1\r\n".
const writeBufferSize = 4<<10 - 16

// mayHaveReached reports whether any byte of r may have reached the
// upstream. Before its first header field the transport has written only
// the request line, into the connection's write buffer: nothing reaches
// the socket until the buffer is flushed or overflows. So a request never
// sent a byte when no connection was had (refused dial, DNS failure, TLS
// handshake failure, dial timeout), or when a connection was had but the
// header was not begun and the request line fits the buffer.
func (c *upstreamCall) mayHaveReached(r *http.Request) bool {
	if c.wrote.Load() {
		return true
	}
	return c.gotConn.Load() && len(r.Method)+len(r.URL.RequestURI()) >= writeBufferSize
}

// forward sends r upstream, unless its lease has ended: never forward
// what no lease covers any more. It watches what the transport writes.
func forward(transport http.RoundTripper, r *http.Request) (*http.Response, error) {
	if l, ok := idem.LeaseFromContext(r.Context()); ok {
		if err := l.Check(); err != nil {
			return nil, fmt.Errorf("%w: %w", errNotForwarded, err)
		}
	}
	return transport.RoundTrip(r) // with the hooks reverseProxy put in r's context
}

// rewriteIdempotencyHeaders sets the headers the upstream gets about the
// key, from the lease only (a client cannot forge them): the key in the one
// form the store keeps (a key sent as a quoted string reaches the upstream
// decoded, as the reconcile lookup and the admin API name it), the tenant,
// the fence and, after a takeover, the previous fence. Request trailers
// are dropped: a client would otherwise add, after the body, headers the
// gateway never checked (a fence, an Authorization). neverResend
// (transport.go) keeps the transport from resending the request by itself.
func rewriteIdempotencyHeaders(in, out *http.Request) {
	out.Trailer = nil
	for _, name := range ownHeaders {
		out.Header.Del(name)
	}
	if l, ok := idem.LeaseFromContext(in.Context()); ok {
		id := l.ID()
		out.Header[idemhttp.HeaderKey] = []string{id.Key}
		if id.Tenant != "" {
			out.Header[TenantIDHeader] = []string{id.Tenant}
		}
		out.Header.Set(FenceHeader, strconv.FormatInt(l.Fence(), 10))
		if prev := l.PreviousFence(); prev != 0 {
			out.Header.Set(PreviousFenceHeader, strconv.FormatInt(prev, 10))
		}
	}
}

// upstreamError answers a failed upstream call and decides the key's
// fate by what the upstream may have seen: when no byte of the request
// reached it, the key is released and the client may retry; once the
// request may have reached it, the outcome is unknown and the key turns
// UNKNOWN, so no retry sends it again until it is reconciled. cfg is the
// request's policy's.
func (g *Gateway) upstreamError(w http.ResponseWriter, r *http.Request, err error, cfg *Config) {
	ctx := r.Context()
	cause := context.Cause(ctx)
	// The answer is the gateway's own, not the request's: it says "not
	// yet" (released, or UNKNOWN), so it is neither accepted nor rejected.
	w.Header().Del(idemhttp.HeaderRepeatabilityResult)
	// The lines name the key as the store and the admin API have it, and
	// its tenant (a hash of the credentials, or the trusted header's value).
	attrs := []any{"method", r.Method, "path", r.URL.Path}
	l, keyed := idem.LeaseFromContext(ctx)
	if keyed {
		attrs = append(attrs, "tenant", l.ID().Tenant, "key", l.ID().Key, "fence", l.Fence())
	}
	c, tracked := ctx.Value(upstreamCallKey{}).(*upstreamCall)
	reached := !tracked || c.mayHaveReached(r)
	if errors.Is(err, errNotForwarded) {
		reached = false
	}
	leaseEnded := errors.Is(err, errNotForwarded) || errors.Is(cause, idem.ErrLeaseLost) || errors.Is(cause, idem.ErrLeaseExpired)
	var netErr net.Error
	timedOut := errors.Is(cause, errUpstreamTimeout) || (errors.As(err, &netErr) && netErr.Timeout())
	if !reached {
		idemhttp.SetDisposition(ctx, idemhttp.DispositionRelease, "")
		if leaseEnded {
			g.cfg.Logger.Warn("idem: not forwarded: the lease ended first", append(attrs, "err", err)...)
			w.Header().Set("Retry-After", "1")
			cfg.ErrorFormat.WriteError(w, http.StatusServiceUnavailable, CodeLeaseLost,
				"the idempotency lease ended before the request was forwarded; it was not sent: retry with the same key")
			return
		}
		g.cfg.Logger.Warn("idem: upstream unreachable; nothing was sent", append(attrs, "err", err)...)
		cfg.ErrorFormat.WriteError(w, http.StatusBadGateway, CodeUpstreamUnreachable, "the upstream could not be reached; the request was not sent: retry with the same key")
		return
	}
	reason := "the request was sent upstream and no complete response came back: " + err.Error()
	switch {
	case leaseEnded:
		reason = "the lease ended while the upstream call ran"
	case errors.Is(cause, errShutdown):
		reason = errShutdown.Error()
	case timedOut:
		reason = fmt.Sprintf("the upstream did not answer within %v", cfg.UpstreamTimeout)
	}
	idemhttp.SetDisposition(ctx, idemhttp.DispositionUnknown, reason)
	msg := "idem: upstream outcome unknown; the key is UNKNOWN"
	if !keyed {
		msg = "idem: upstream outcome unknown; the request had no key"
	}
	g.cfg.Logger.Warn(msg, append(attrs, "reason", reason)...)
	const after = "; the request may have taken effect, and the key is UNKNOWN: a retry with it gets the result once it is reconciled, never a second execution"
	switch {
	case leaseEnded:
		cfg.ErrorFormat.WriteError(w, http.StatusServiceUnavailable, CodeLeaseLost, "the idempotency lease ended while the upstream call ran"+after)
	case timedOut:
		cfg.ErrorFormat.WriteError(w, http.StatusGatewayTimeout, CodeUpstreamTimeout, reason+after)
	default:
		cfg.ErrorFormat.WriteError(w, http.StatusBadGateway, CodeUpstreamNoResponse, "no complete response came back from the upstream"+after)
	}
}
