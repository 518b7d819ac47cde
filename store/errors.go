package store

import "errors"

// The errors a Store returns. Package idem returns the same values (its
// ErrLeaseLost is this ErrLeaseLost), so errors.Is finds them whichever
// package a caller names. Their text starts with "idem:" because that is
// where an application meets them.
var (
	// ErrLeaseLost is returned by Complete, Extend, Release, MarkUnknown
	// and Resolve when the record is no longer the caller's (see Store):
	// nothing was changed.
	ErrLeaseLost = errors.New("idem: lease lost")
	// ErrNotFound is returned by Get, Claim and Resolve when the key has
	// no record.
	ErrNotFound = errors.New("idem: key not found")
	// ErrNotUnknown is returned by Resolve for a key that is not UNKNOWN.
	ErrNotUnknown = errors.New("idem: key is not in state UNKNOWN")
	// ErrStaleFence is returned by Resolve when the fence given is not the
	// UNKNOWN record's, and by pgstore's guardrail when a newer fence has
	// written (pgstore.ErrStaleFence is this value).
	ErrStaleFence = errors.New("idem: fence does not match the record")
	// ErrOutcomeUnknown marks work whose effect may have happened although
	// no result is known (idem.ErrOutcomeUnknown is this value): pgstore's
	// guardrail wraps it around a commit that failed after the work ran.
	ErrOutcomeUnknown = errors.New("idem: outcome unknown")
	// ErrInvalidCursor is returned by ListUnknown for a ListParams.After
	// that is not the Next of a page of the same listing (malformed, or
	// another tenant's): the caller's error, not the store's.
	ErrInvalidCursor = errors.New("idem: invalid list cursor")
	// ErrStoreFull is returned by a bounded store (store/memstore) when it
	// has no room left that it may free.
	ErrStoreFull = errors.New("idem: store full")
	// ErrInvalidKey is returned when an idempotency key is empty, longer
	// than MaxKeyLength bytes, not UTF-8, or holds control characters.
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
	// ErrInvalidTenant is returned when a tenant is longer than
	// MaxKeyLength bytes, not UTF-8, or holds control characters.
	ErrInvalidTenant = errors.New("idem: invalid tenant")
	// ErrInvalidFingerprint is returned when a fingerprint is longer than
	// MaxKeyLength bytes, not UTF-8, or holds control characters.
	ErrInvalidFingerprint = errors.New("idem: invalid fingerprint")
)
