package idem

import (
	"errors"
	"time"

	"github.com/idemkit/idem/store"
)

// The errors of the engine. Those a store returns too are the values of
// package store (ErrLeaseLost is store.ErrLeaseLost). A store's own failure
// reaches the engine's caller wrapped in ErrStore; errors.Is finds both.
var (
	// ErrLeaseLost is returned when the key is no longer PROCESSING under
	// the lease's owner and fence, because the lease expired and another
	// attempt took the key over, or the key was deleted. Nothing was
	// changed. It is also the cause of a Lease.Context cancelled for that
	// reason.
	ErrLeaseLost = store.ErrLeaseLost
	// ErrLeaseExpired is returned by Lease.Check, and is the cause of a
	// cancelled Lease.Context, when the lease's deadline passed without a
	// successful renewal.
	ErrLeaseExpired = errors.New("idem: lease expired before renewal")
	// ErrLeaseClosed is returned by Lease.Complete and Lease.Release when
	// the lease was already completed, released or lost.
	ErrLeaseClosed = errors.New("idem: lease already completed, released or lost")
	// ErrNotFound is returned by Get when the key has no record.
	ErrNotFound = store.ErrNotFound
	// ErrInvalidKey is returned when an idempotency key is empty, longer
	// than MaxKeyLength bytes, not UTF-8, or holds control characters.
	ErrInvalidKey = store.ErrInvalidKey
	// ErrInvalidTenant is returned when a tenant is longer than
	// MaxKeyLength bytes, not UTF-8, or holds control characters.
	ErrInvalidTenant = store.ErrInvalidTenant
	// ErrInvalidFingerprint is returned when a fingerprint is longer than
	// MaxKeyLength bytes, not UTF-8, or holds control characters.
	ErrInvalidFingerprint = store.ErrInvalidFingerprint
	// ErrInvalidRequest is returned by Begin and Do for a Request that sets
	// both or neither of Fingerprint and NoFingerprint, or whose
	// LeaseDuration or Retention is negative or under the 1ms resolution
	// of stores.
	ErrInvalidRequest = errors.New("idem: invalid request options")
	// ErrResultTooLarge is returned by Lease.Complete when the result body
	// is over Options.MaxResultBytes. The lease is kept, so the caller can
	// Release it.
	ErrResultTooLarge = errors.New("idem: result too large to store")
	// ErrStore is returned, wrapping the store's own error, when a store
	// call fails (unreachable, timeout, protocol error). After a Begin that
	// failed so, the key was not acquired: fail closed.
	ErrStore = errors.New("idem: store failed")
	// ErrInFlight is returned by Do when another attempt holds the key,
	// as an *InFlightError that says when that attempt's lease ends.
	ErrInFlight = errors.New("idem: request in flight")
	// ErrMismatch is returned by Do when the key was used before with a
	// different fingerprint.
	ErrMismatch = errors.New("idem: key reused with a different request")
	// ErrOutcomeUnknown marks work whose effect may have happened although
	// no result is known (see OutcomeUnknown), and is returned, as an
	// *OutcomeUnknownError, by Do for a key in state UNKNOWN. Every "outcome
	// unknown" error of this module matches it: idemclient's and
	// idemgrpc's OutcomeUnknownError, pgstore's guardrail after a failed
	// commit.
	ErrOutcomeUnknown = store.ErrOutcomeUnknown
	// ErrKeyExpired is returned by Do for a key that completed and whose
	// result's retention ended within its key retention
	// (Options.KeyRetention): the work is not run again, and there is no
	// result to return.
	ErrKeyExpired = errors.New("idem: key expired: the request ran and its result is no longer kept")
	// ErrNotUnknown is returned by Resolve for a key that is not UNKNOWN.
	ErrNotUnknown = store.ErrNotUnknown
	// ErrStaleFence is returned by Resolve when the fence given is not the
	// UNKNOWN record's, and by pgstore's guardrail when a newer fence has
	// written (pgstore.ErrStaleFence is this value).
	ErrStaleFence = store.ErrStaleFence
	// ErrInvalidCursor is returned by ListUnknown for a ListParams.After
	// that is not the Next of a page of the same listing (malformed, or
	// another tenant's): the caller's error, not the store's.
	ErrInvalidCursor = store.ErrInvalidCursor
	// ErrTenantMissing says that a request carries none of the
	// credentials its keys are scoped by: a tenant function returns it
	// (idemhttp's Options.Tenant, idemgrpc's), and the request is refused
	// (HTTP 400 tenant_missing, gRPC UNAUTHENTICATED) rather than put in a
	// scope shared by every anonymous client. idemhttp.ErrTenantMissing
	// and idemgrpc.ErrTenantMissing are this value.
	ErrTenantMissing = errors.New("idem: no tenant: the request carries none of the credentials its keys are scoped by")
	// ErrShutdown is returned by Begin and Do once Engine.Shutdown was
	// called: nothing was taken and nothing ran.
	ErrShutdown = errors.New("idem: engine shut down")
)

// InFlightError is returned by Do when another attempt holds the key.
// errors.Is(err, ErrInFlight) is true.
type InFlightError struct {
	// RetryAfter is when asking again is likely to find the other attempt
	// done. From Do: when a work as long as this engine's recent Do works
	// (a moving mean of how long their functions ran), begun when the
	// other attempt acquired the key, would be done; for an attempt
	// already running longer, a quarter of such a work or of its age,
	// whichever is longer; never after the other attempt's lease ends.
	// Before this engine measured any work, the rest of that lease. From
	// Delete: the rest of that lease.
	RetryAfter time.Duration
}

// Error says that the key is in flight and when to ask again.
func (e *InFlightError) Error() string {
	return ErrInFlight.Error() + " (retry in " + e.RetryAfter.String() + ")"
}

// Is reports ErrInFlight.
func (e *InFlightError) Is(target error) bool { return target == ErrInFlight }
