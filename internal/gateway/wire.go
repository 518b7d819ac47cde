package gateway

// TenantIDHeader carries the tenant of a deduplicated request to the
// upstream, and to the reconcile lookup: the bytes the store keys the
// request by and the admin API names in /v1/keys/{tenant}/{key}. It is
// absent for the empty tenant (anonymous clients). docs/reconcile.md says
// how it is made from the request, so an upstream can also compute it.
const TenantIDHeader = "Idempotency-Tenant"

// ownHeaders are the request headers the gateway sets for the upstream
// from the lease; a client's own are never forwarded.
var ownHeaders = []string{FenceHeader, PreviousFenceHeader, TenantIDHeader}
