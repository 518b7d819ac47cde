package store

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// State is the state of one idempotency key in a Store.
type State uint8

const (
	// StateAbsent: the key was never seen, was released after a retryable
	// failure, was deleted, or its record expired. The next attempt acquires it.
	StateAbsent State = iota
	// StateProcessing: one owner holds a lease on the key and is doing the work.
	StateProcessing
	// StateCompleted: the work finished; the stored Result is replayed to retries.
	StateCompleted
	// StateUnknown: the work may have had its effect, but no result was
	// recorded (the outcome was reported unknown, or the owner's lease
	// ended with the key still PROCESSING). A retry never runs it again;
	// it waits for a reconciliation (idem.Options.Reconcile) or an operator's
	// idem.Engine.Resolve. The record keeps its fingerprint and fence and
	// is never forgotten by time: it stays until settled (Complete by its
	// owner, Release of an abandoned one by its owner, Resolve, Delete).
	StateUnknown
	// StateExpired: a tombstone. A COMPLETED record whose retention ended
	// while its key retention (CompleteParams.KeyRetention) goes on: the
	// result is gone, the key is not. Record keeps the fingerprint, the
	// fence, CompletedAt and, in Result, the original Status only (no
	// header, no body); AcquiredAt may be zero (the Redis store does not
	// keep it). A retry never runs it again; an Acquire returns it and
	// acquires nothing.
	StateExpired
)

// String returns the state's name as it appears in docs/state-machine.md.
func (s State) String() string {
	switch s {
	case StateAbsent:
		return "ABSENT"
	case StateProcessing:
		return "PROCESSING"
	case StateCompleted:
		return "COMPLETED"
	case StateUnknown:
		return "UNKNOWN"
	case StateExpired:
		return "EXPIRED"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Result is what a finished attempt produced, stored byte-exact and replayed
// to every later attempt with the same key. For non-HTTP work (idem.Engine.Do)
// only Body is used.
type Result struct {
	Status int
	Header http.Header
	Body   []byte
}

// ID names one idempotency key within one tenant. Stores must keep two IDs
// apart whenever their fields differ: tenant "a:b" with key "c" never meets
// tenant "a" with key "b:c".
type ID struct {
	Tenant string
	Key    string
}

// LeaseRef identifies one acquisition of a key: the owner token the engine
// generated and the fencing token the store minted. Every change to a
// PROCESSING record must match both, in the same atomic step.
type LeaseRef struct {
	ID
	Owner string
	Fence int64
}

// Record is a store's view of one key, as returned by Acquire and Get.
type Record struct {
	ID
	State       State
	Owner       string // PROCESSING: the lease holder; COMPLETED, UNKNOWN: the owner whose attempt made it so
	Fence       int64  // the fencing token of the acquisition that made this record
	Fingerprint string
	AcquiredAt  time.Time // by the store's clock
	CompletedAt time.Time // COMPLETED: when completed; UNKNOWN: when marked; by the store's clock
	// TTL is how long the record still lives, as the store measured it: the
	// rest of the lease for PROCESSING, the rest of the retention for
	// COMPLETED, the rest of the key retention for EXPIRED. For UNKNOWN
	// (a PROCESSING record whose lease ended included) it is 0: kept
	// until settled, with no end in time.
	TTL time.Duration
	// Retention and KeyRetention, on a PROCESSING or UNKNOWN record, are
	// the retentions its attempt was acquired (or marked, or extended)
	// with, the longer of each kept: a resolution records its result for
	// at least them, as the attempt's own Complete would have (a route's
	// retention may be longer than the engine's). Zero when the store
	// does not keep them; a COMPLETED or EXPIRED record has TTL instead.
	Retention    time.Duration
	KeyRetention time.Duration
	// Reason says why an UNKNOWN record is unknown (ReasonAbandoned, or
	// what the work reported to MarkUnknown).
	Reason string
	// Label is AcquireParams.Label, kept from the acquisition through
	// every change of the record (COMPLETED, UNKNOWN, resolved); a
	// tombstone (StateExpired) keeps none.
	Label string
	// Result is the stored result, COMPLETED only. It is read-only: a
	// store may hand the same Result (its header map, value slices and
	// body) to every caller, so a caller that wants to change it copies
	// it first.
	Result *Result
}

// ReasonAbandoned is the Reason of an UNKNOWN record that an Acquire made
// from a PROCESSING record whose lease had ended: its owner crashed or
// stalled, and whether its work took effect is not known.
const ReasonAbandoned = "abandoned"

// AcquireParams asks a store to create a PROCESSING record for ID if the key
// is absent.
//
// A PROCESSING record whose lease ended (its owner crashed or stalled) is
// not absent: the owner's work may have had its effect. With TakeOver
// false the store turns it UNKNOWN (Reason ReasonAbandoned, kept until
// settled) in the same atomic step and returns it; with TakeOver true it
// acquires the key with a new fence and says what it took over.
type AcquireParams struct {
	ID
	Owner         string // random, generated by the engine for this attempt
	Fingerprint   string
	LeaseDuration time.Duration
	// Retention and KeyRetention are the engine's retentions (as in
	// CompleteParams). They never end a PROCESSING or UNKNOWN record: its
	// work may have run, so it is kept, its lease running or ended, until
	// it is settled (Complete, Release, Resolve, Delete); a store that
	// forgot it let the next retry run the work again. A store may use
	// them to schedule its housekeeping (pgstore: when its reaper first
	// looks at the row); bounded memory is the store's own bound (memstore
	// MaxBytes: store.ErrStoreFull) and the operator's alerts on
	// idem_unknown_keys.
	Retention    time.Duration
	KeyRetention time.Duration
	TakeOver     bool
	// Label says what the work is, for an operator who finds the key
	// UNKNOWN: e.g. "POST /v1/orders route=orders". At most
	// MaxLabelLength bytes; it is shown to whoever may read the key's
	// record, so it holds no secret. Empty: none.
	Label string
}

// MaxLabelLength bounds AcquireParams.Label; the engine cuts longer ones.
const MaxLabelLength = 200

// MaxDuration is the longest lease, retention or key retention a store
// must keep, and the longest the engine asks for (it refuses longer ones,
// in its Options and per request): ten years. A store keeps a record's
// end as a point in time, and past that the clock arithmetic of some
// overflows (the memory store's ends are nanoseconds since 1970, which
// run out in 2262): such a record ended at once, and a retry ran the work
// again.
const MaxDuration = 10 * 365 * 24 * time.Hour

// AcquireResult reports whether the caller now holds the key. When Acquired
// is true, Record is the new PROCESSING record, with the fence the store
// minted; otherwise it is the record that already held the key.
type AcquireResult struct {
	Acquired bool
	Record   Record
	// Takeover is set when the acquisition took over a PROCESSING record
	// whose lease had ended (AcquireParams.TakeOver): that attempt's
	// outcome is unknown.
	Takeover *Takeover
}

// Takeover describes the attempt whose ended lease an acquisition took
// over. Its work may have run: pass Fence on (the gateway sends it as
// Idempotency-Previous-Fence) so the downstream can look it up.
type Takeover struct {
	Fence      int64     // the previous attempt's fencing token
	AcquiredAt time.Time // when the previous attempt acquired the key, by the store's clock
}

// CompleteParams turns the PROCESSING record held by Lease into a COMPLETED
// record that keeps Result for Retention. Result's header and body stay the
// caller's: a store copies what it keeps before Complete returns, and the
// caller may reuse them after (idemhttp pools its response buffers).
type CompleteParams struct {
	LeaseRef
	Result    Result
	Retention time.Duration
	// KeyRetention is how long, from completion, the key is remembered:
	// when Retention ends, the record becomes a tombstone (StateExpired)
	// that lives until KeyRetention ends. Zero, or not above Retention,
	// keeps none: the key ends with its result.
	KeyRetention time.Duration
}

// ExtendParams sets the remaining lease of the PROCESSING record held by
// LeaseRef to LeaseDuration, counted from now by the store's clock; the
// record is kept until settled, its lease running or ended (Retention and
// KeyRetention end nothing, see AcquireParams).
type ExtendParams struct {
	LeaseRef
	LeaseDuration time.Duration
	Retention     time.Duration
	KeyRetention  time.Duration
}

// MarkUnknownParams turns the record held by LeaseRef UNKNOWN, kept until
// settled (Retention and KeyRetention end nothing, see AcquireParams): the
// work may have had its effect, and no result is known.
type MarkUnknownParams struct {
	LeaseRef
	Reason       string // at most MaxReasonLength bytes
	Retention    time.Duration
	KeyRetention time.Duration
}

// MaxReasonLength bounds Record.Reason; longer reasons are cut by the engine.
const MaxReasonLength = 256

// ClaimParams asks for the right to reconcile an UNKNOWN record for
// LeaseDuration: one reconciliation per key at a time, across every
// process that shares the store.
type ClaimParams struct {
	ID
	Owner         string // random, generated by the engine for this claim
	LeaseDuration time.Duration
}

// ClaimResult reports whether the caller now holds the claim. Record is
// the key's record either way (the UNKNOWN record when claimed).
type ClaimResult struct {
	Claimed bool
	Record  Record
}

// ResolveParams ends an UNKNOWN record: with Result, it becomes COMPLETED
// (kept for Retention and replayed); with a nil Result, the work is known
// not to have run and the record is deleted, so a retry runs it. Fence
// must be the UNKNOWN record's. Claim is the owner of the caller's claim
// (ClaimParams.Owner), or empty for an operator's resolution, which needs
// no claim.
type ResolveParams struct {
	ID
	Fence     int64
	Claim     string
	Result    *Result
	Retention time.Duration
	// KeyRetention, with a Result, leaves a tombstone as
	// CompleteParams.KeyRetention does.
	KeyRetention time.Duration
}

// DeleteParams names the record Store.Delete removes: the key's record
// in any state when Fence is zero, else only the record with that fence
// (one acquisition's, whatever became of it), in the same atomic step as
// the check; a record with another fence is left as it is.
type DeleteParams struct {
	ID
	Fence int64
}

// ListParams asks for a page of UNKNOWN records, of one Tenant or, with
// AllTenants, of all. After is the Next of the previous page ("" for the
// first); Limit is at most MaxListLimit (zero: DefaultListLimit).
type ListParams struct {
	Tenant     string
	AllTenants bool
	After      string
	Limit      int
}

// ListPage is one page of UNKNOWN records, in a stable order. Next is
// empty on the last page.
type ListPage struct {
	Records []Record
	Next    string
}

// Page sizes of ListUnknown.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// Store keeps idempotency records. It is the extension point for new
// backends: implement it and pass store/storetest.Run.
//
// A COMPLETED record whose Complete had a KeyRetention above its Retention
// becomes a tombstone (StateExpired) when the retention ends, by the
// store's clock, and stays one until the key retention ends: Acquire and
// Get return it (Acquire acquires nothing), Delete removes it.
//
// A store mints fencing tokens: every Acquire that succeeds on a key gets a
// fence strictly greater than any fence handed out before for that key, also
// after that key's record was released, deleted or expired.
//
// Complete, Extend, Release and MarkUnknown check, in the same atomic step
// as the change, that the key is PROCESSING with the given owner and fence
// (for Complete and MarkUnknown, UNKNOWN with them is accepted too: the
// owner outlived its lease and knows more than the record; for Release,
// UNKNOWN with Reason ReasonAbandoned and no live reconciliation claim:
// only its lease's end made it UNKNOWN, and the owner knows its work did
// not run); otherwise they
// change nothing and return ErrLeaseLost. The check is on owner and fence,
// not on the lease's end: a record still the caller's, that nobody took
// over, accepts its owner's late word. Extend never re-creates an ended
// record, and Complete never overwrites a COMPLETED one (a repeated
// Complete by the owner that completed it returns nil and keeps the first
// result). A record whose outcome may be unknown (PROCESSING, its lease
// running or ended, and UNKNOWN) is never forgotten by time: a crashed
// owner's key stays UNKNOWN until settled (Complete by its owner, however
// late; Release by its owner; Resolve; Delete), since its work may have
// run. COMPLETED and EXPIRED records end with their retentions.
type Store interface {
	// Acquire creates a PROCESSING record with a new fence if the key is
	// absent, else returns the record that holds it; see AcquireParams for
	// a record whose lease ended.
	Acquire(ctx context.Context, p AcquireParams) (AcquireResult, error)
	// Complete turns the caller's PROCESSING (or UNKNOWN) record into COMPLETED.
	Complete(ctx context.Context, p CompleteParams) error
	// Extend renews the caller's lease; it never re-creates an ended record.
	Extend(ctx context.Context, p ExtendParams) error
	// Release deletes the caller's PROCESSING record, or its UNKNOWN one
	// whose reason is ReasonAbandoned while no reconciliation claim holds
	// it, so a retry can run.
	Release(ctx context.Context, p LeaseRef) error
	// MarkUnknown turns the caller's PROCESSING record UNKNOWN.
	MarkUnknown(ctx context.Context, p MarkUnknownParams) error
	// Claim takes the reconciliation claim on an UNKNOWN record if nobody
	// holds it (or the holder's claim ended). It returns ErrNotFound for
	// an absent key, and Claimed false with the record in any other state.
	Claim(ctx context.Context, p ClaimParams) (ClaimResult, error)
	// Resolve ends an UNKNOWN record. It returns ErrNotFound for an
	// absent key, ErrNotUnknown for a record in another state,
	// ErrStaleFence when the fence differs, and ErrLeaseLost when Claim is
	// set and not the record's current claim.
	Resolve(ctx context.Context, p ResolveParams) error
	// ListUnknown returns a page of UNKNOWN records without a full scan
	// of the store. A PROCESSING record whose lease ended is one of them
	// from its lease's end, reported as Get reports it (UNKNOWN, Reason
	// ReasonAbandoned, CompletedAt the lease's end): its owner may have
	// crashed, and no retry may ever come to turn it UNKNOWN. Listing
	// changes no record.
	ListUnknown(ctx context.Context, p ListParams) (ListPage, error)
	// Get returns ErrNotFound for an absent key. A PROCESSING record whose
	// lease ended is reported UNKNOWN with Reason ReasonAbandoned (the
	// next Acquire makes it so).
	Get(ctx context.Context, id ID) (Record, error)
	// Delete removes the key (admin invalidation): its record in any
	// state, or only the record with DeleteParams.Fence, and reports
	// whether it removed a record. A lease on a deleted key is lost.
	Delete(ctx context.Context, p DeleteParams) (bool, error)
}
