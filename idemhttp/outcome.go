package idemhttp

import "strconv"

// Outcome is what the middleware did with one request, reported to
// Options.OnOutcome for metrics. Its String is the metric label.
type Outcome uint8

const (
	// OutcomePassed: not an idempotent request (another method, or no key
	// and RequireKey off); the handler ran unprotected.
	OutcomePassed Outcome = iota + 1
	// OutcomeExecuted: the handler ran under a lease and its result was
	// stored (possibly as not replayable).
	OutcomeExecuted
	// OutcomeReleased: the handler ran and answered that it did not
	// process the request (the StatusPolicy, or its SetDisposition, said
	// so); the key was released. A panic never releases the key: it is
	// OutcomeMarkedUnknown.
	OutcomeReleased
	// OutcomeReplayed: the stored result was replayed; the handler did not run.
	OutcomeReplayed
	// OutcomeConflict: another request with the key was in flight: 409.
	OutcomeConflict
	// OutcomeMismatch: the key was used for a different request: 422.
	OutcomeMismatch
	// OutcomeNotReplayable: the key's request ran, but its response was
	// hijacked or streamed past the buffer: 422.
	OutcomeNotReplayable
	// OutcomeRejected: bad input (key, tenant, body): 400 or 413.
	OutcomeRejected
	// OutcomeStoreError: the store failed, at the start (503, the handler
	// did not run), or when storing the result and the engine could not
	// hold it either (its hold was full, idem.Options.MaxHeld): the key
	// stays PROCESSING until its lease ends. A result the engine holds is
	// reported OutcomeExecuted (and to an idem.HoldObserver).
	OutcomeStoreError
	// OutcomeFailedOpen: the store failed and FailOpen ran the handler
	// without protection.
	OutcomeFailedOpen
	// OutcomeLeaseLost: the lease ended before the handler could start
	// (503 lease_lost, the key released: nothing ran), or the handler ran
	// but its lease was lost (expired and taken over, or the key deleted):
	// its result was not stored and the other owner's record was left
	// untouched.
	OutcomeLeaseLost
	// OutcomeKeyUnknown: the key is UNKNOWN (an earlier attempt may have
	// taken effect): 503 outcome_unknown, the handler did not run.
	OutcomeKeyUnknown
	// OutcomeMarkedUnknown: the handler ran and its outcome is unknown (it
	// panicked, declared so with SetDisposition, or the StatusPolicy said
	// so): the key was marked UNKNOWN.
	OutcomeMarkedUnknown
	// OutcomeStoreFull: a bounded store had no room for a new key: 503,
	// the handler did not run.
	OutcomeStoreFull
	// OutcomeExpired: the key's request ran and its response's retention
	// ended within the key retention: 410 key_expired, the handler did not
	// run.
	OutcomeExpired
)

var outcomeNames = [...]string{
	OutcomePassed:        "passed",
	OutcomeExecuted:      "executed",
	OutcomeReleased:      "released",
	OutcomeReplayed:      "replayed",
	OutcomeConflict:      "conflict",
	OutcomeMismatch:      "mismatch",
	OutcomeNotReplayable: "not_replayable",
	OutcomeRejected:      "rejected",
	OutcomeStoreError:    "store_error",
	OutcomeFailedOpen:    "failed_open",
	OutcomeLeaseLost:     "lease_lost",
	OutcomeKeyUnknown:    "unknown",
	OutcomeMarkedUnknown: "marked_unknown",
	OutcomeStoreFull:     "store_full",
	OutcomeExpired:       "expired",
}

// String returns the outcome's metric label, e.g. "replayed".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}
