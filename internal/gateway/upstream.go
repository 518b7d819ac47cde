package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
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

// errShutdown ends the upstream calls still running when the shutdown
// timeout ends.
var errShutdown = errors.New("gateway: shut down with the request in flight")

// rewriteIdempotencyHeaders sets the headers the upstream gets about the
// key, from the lease only (a client cannot forge them): the key in the one
// form the store keeps (a key sent as a quoted string reaches the upstream
// decoded, as the reconcile lookup and the admin API name it), the tenant,
// the fence and, after a takeover, the previous fence. Request trailers
// are dropped: a client would otherwise add, after the body, headers the
// gateway never checked (a fence, an Authorization). idemclient.Transport
// keeps the transport from resending the request by itself.
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
// fate by what the upstream may have seen (idemclient.Sent): when no byte
// of the request reached it, the key is released and the client may
// retry; once the request may have reached it, the outcome is unknown and
// the key turns UNKNOWN, so no retry sends it again until it is
// reconciled. cfg is the request's policy's. The key's reason, which
// every retry is shown, names the class of the failure, never the
// transport's error text (it holds the upstream's address).
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
	reached := idemclient.Sent(err)
	leaseEnded := errors.Is(err, idem.ErrLeaseLost) || errors.Is(err, idem.ErrLeaseExpired) ||
		errors.Is(cause, idem.ErrLeaseLost) || errors.Is(cause, idem.ErrLeaseExpired)
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
	reason := "the request was sent upstream and no complete response came back"
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
	g.cfg.Logger.Warn(msg, append(attrs, "reason", reason, "err", err)...)
	if g.reconciles {
		// A retry reconciles the key first, and may find its result at
		// once; without a reconciliation only an operator settles it, and
		// no retry is invited (the policy of the 503 outcome_unknown).
		w.Header().Set("Retry-After", "1")
	}
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
