package idemgrpc

import (
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The protocol's metadata names.
const (
	// MetadataKey is the request metadata that carries the idempotency key.
	MetadataKey = "idempotency-key"
	// TrailerReplayed is set to "true" in the trailer of an answer that is
	// a replay of a stored result (the handler did not run).
	TrailerReplayed = "idempotent-replayed"
)

// ErrorDomain is the Domain of the google.rpc.ErrorInfo detail that every
// status the interceptor answers itself carries.
const ErrorDomain = "github.com/idemkit/idem"

// The Reason of the google.rpc.ErrorInfo detail of each status the server
// interceptor answers itself: clients branch on it, not on the message.
const (
	ReasonKeyRequired      = "KEY_REQUIRED"      // INVALID_ARGUMENT: RequireKey and no key
	ReasonKeyInvalid       = "KEY_INVALID"       // INVALID_ARGUMENT: empty, too long, control characters, sent twice
	ReasonTenantMissing    = "TENANT_MISSING"    // UNAUTHENTICATED: no tenant and anonymous calls not allowed
	ReasonTenantInvalid    = "TENANT_INVALID"    // INVALID_ARGUMENT: the tenant cannot scope keys
	ReasonKeyInFlight      = "KEY_IN_FLIGHT"     // ABORTED, with RetryInfo
	ReasonKeyMismatch      = "KEY_MISMATCH"      // FAILED_PRECONDITION
	ReasonStoreUnavailable = "STORE_UNAVAILABLE" // UNAVAILABLE: the handler did not run
	ReasonStoreFull        = "STORE_FULL"        // RESOURCE_EXHAUSTED: the handler did not run
	ReasonLeaseLost        = "LEASE_LOST"        // UNAVAILABLE: the lease ended before the handler started; it did not run
	ReasonOutcomeUnknown   = "OUTCOME_UNKNOWN"   // UNKNOWN (or INTERNAL after a panic): the work may have taken effect
	ReasonNotReplayable    = "NOT_REPLAYABLE"    // INTERNAL: the stored result cannot be decoded here
	ReasonKeyExpired       = "KEY_EXPIRED"       // FAILED_PRECONDITION: the call ran, its result's retention ended within the key retention

	// ReasonStepRequired is the client interceptor's own: INVALID_ARGUMENT
	// for a call under an idempotency scope whose context names no step
	// (idemclient.ErrNoStep), which it does not send.
	ReasonStepRequired = "STEP_REQUIRED"
)

// newStatus builds a status with an ErrorInfo detail for reason and, when
// retryAfter > 0, a RetryInfo detail.
func newStatus(code codes.Code, reason, msg string, retryAfter time.Duration, meta map[string]string) *status.Status {
	s := status.New(code, msg)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta}}
	if retryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retryAfter)})
	}
	if d, err := s.WithDetails(details...); err == nil {
		return d
	}
	return s
}

func errStatus(code codes.Code, reason, msg string) error {
	return newStatus(code, reason, msg, 0, nil).Err()
}

// unknownStatus is the answer for a key whose outcome is unknown; see the
// package documentation for why it is UNKNOWN.
func unknownStatus(code codes.Code, reason string, fence int64, retryAfter time.Duration) error {
	msg := "idem: an earlier call with this idempotency key may have taken effect and its result is not known (" +
		reason + "); it will not run again until its outcome is reconciled or resolved"
	return newStatus(code, ReasonOutcomeUnknown, msg, retryAfter,
		map[string]string{"fence": strconv.FormatInt(fence, 10), "reason": reason}).Err()
}

// ErrorInfo returns the reason of the idem ErrorInfo detail of s (one of
// the Reason constants), or "" when s carries none: the status came from
// the handler, or from something other than the interceptor.
func ErrorInfo(s *status.Status) string {
	if s == nil {
		return ""
	}
	for _, d := range s.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// RetryDelay returns the delay of the RetryInfo detail of s, if it has one.
func RetryDelay(s *status.Status) (time.Duration, bool) {
	if s == nil {
		return 0, false
	}
	for _, d := range s.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
