package gateway

import (
	"net/http"

	"github.com/idemkit/idem/idemhttp"
)

// The defaults --error-format stripe brings besides the error shape, so
// that the gateway keeps Stripe's own rules for what a key covers.

// DefaultTenantFrom is --tenant-from when it is not given: the
// Authorization header and, under the stripe format, Stripe-Account too. A
// Stripe Connect platform calls with its own key for every connected
// account and names the account in Stripe-Account; Stripe scopes keys per
// account, so a key reused for two accounts is two requests, never one
// account's charge replayed to the other.
func DefaultTenantFrom(format idemhttp.ErrorFormat) []string {
	if format == idemhttp.ErrorFormatStripe {
		return []string{"authorization", "header:Stripe-Account"}
	}
	return []string{"authorization"}
}

// statusPolicy is the middleware's status policy for the format:
// idemhttp.DefaultStatusPolicy for problem, stripeStatusPolicy for
// stripe. Never nil: a route's statuses fall back to it.
func statusPolicy(format idemhttp.ErrorFormat) func(int) idemhttp.Disposition {
	if format == idemhttp.ErrorFormatStripe {
		return stripeStatusPolicy
	}
	return idemhttp.DefaultStatusPolicy
}

// stripeStatusPolicy releases the key on an upstream 400 and otherwise
// follows idemhttp.DefaultStatusPolicy. Stripe answers 400 when a
// request's parameters fail validation, before anything runs, and saves
// no result for it: the client corrects the request and sends it again
// under the same key. Stored, the 400 would be replayed to that corrected
// request as key_mismatch. The default policy stores a 400, because an API
// in general does not promise that its 400 came before any effect
// (docs/problems.md).
func stripeStatusPolicy(status int) idemhttp.Disposition {
	if status == http.StatusBadRequest {
		return idemhttp.DispositionRelease
	}
	return idemhttp.DefaultStatusPolicy(status)
}
