package gateway

import (
	"net/http"
	"slices"
	"strings"

	"github.com/idemkit/idem/idemhttp"
)

// TenantIDHeader carries the tenant of a deduplicated request to the
// upstream, and to the reconcile lookup: the bytes the store keys the
// request by and the admin API names in /v1/keys/{tenant}/{key}. It is
// absent for the empty tenant (anonymous clients). docs/reconcile.md says
// how it is made from the request, so an upstream can also compute it.
const TenantIDHeader = "Idempotency-Tenant"

// CodeHopByHopHeader (400): the request's Connection header names a header
// the gateway deduplicates or scopes the key by, or one it sets for the
// upstream; the request was not forwarded and no key was taken.
const CodeHopByHopHeader = "hop_by_hop_header"

// ownHeaders are the request headers the gateway sets for the upstream
// from the lease; a client's own are never forwarded.
var ownHeaders = []string{FenceHeader, PreviousFenceHeader, TenantIDHeader}

// keyedHeaders are the canonical names of the request headers a
// deduplicated request's key depends on or the gateway sets: the key, the
// tenant's sources and ownHeaders.
func keyedHeaders(sources []tenantSource) []string {
	names := append([]string{idemhttp.HeaderKey}, ownHeaders...)
	for _, s := range sources {
		switch s.kind {
		case "authorization":
			names = append(names, "Authorization")
		case "header":
			names = append(names, s.name)
		case "cookie":
			names = append(names, "Cookie")
		}
	}
	return names
}

// refuseHopByHopKeys answers 400 hop_by_hop_header to a request the
// gateway deduplicates (a protected method with an Idempotency-Key) whose
// Connection header names one of names. A proxy removes the headers
// Connection names before forwarding (RFC 9110 §7.6.1), so the upstream
// would not get the key, or the credentials the tenant came from, that the
// gateway deduplicated on: a lookup by key would then find nothing and the
// request would run again. Forwarding them anyway would break what the
// client asked of every proxy on the path; the request is refused instead.
// onReject reports the refusal (metrics, log).
func refuseHopByHopKeys(next http.Handler, methods, names []string, format idemhttp.ErrorFormat, onReject func(*http.Request)) http.Handler {
	if methods == nil {
		methods = []string{http.MethodPost, http.MethodPatch}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, keyed := r.Header[idemhttp.HeaderKey]; keyed && slices.Contains(methods, r.Method) {
			if name := namedHopByHop(r.Header["Connection"], names); name != "" {
				format.WriteError(w, http.StatusBadRequest, CodeHopByHopHeader,
					"the Connection header names "+name+", which the idempotency key depends on or the gateway sets: it would not reach the upstream; remove it from Connection")
				onReject(r)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// namedHopByHop returns the first of names that the Connection header
// values list, or "".
func namedHopByHop(connection, names []string) string {
	for _, v := range connection {
		for opt := range strings.SplitSeq(v, ",") {
			if c := http.CanonicalHeaderKey(strings.TrimSpace(opt)); slices.Contains(names, c) {
				return c
			}
		}
	}
	return ""
}
