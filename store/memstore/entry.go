package memstore

import (
	"time"

	"github.com/idemkit/idem/store"
)

// entry is a record as the store holds it.
type entry struct {
	rec        store.Record // TTL unused: derived from leaseUntil and expires
	frozen     bool         // a copy of a frozen record (frozen.go), COMPLETED or EXPIRED
	result     store.Result // frozen: rec.Result points here
	leaseUntil time.Time    // PROCESSING: when the lease ends
	expires    time.Time    // frozen: when the record ends; PROCESSING and UNKNOWN never end by time
	claimOwner string       // UNKNOWN: the reconciliation claim's holder, until claimUntil
	claimUntil time.Time
	keyUntil   time.Time // COMPLETED: when its tombstone ends (CompleteParams.KeyRetention); zero: none
	size       int64
}

// releasable reports whether the owner may release e: it is PROCESSING,
// or UNKNOWN only because its lease ended (ReasonAbandoned) and no
// reconciliation claim holds it.
func (e *entry) releasable(now time.Time) bool {
	switch e.rec.State {
	case store.StateProcessing:
		return true
	case store.StateUnknown:
		return e.rec.Reason == store.ReasonAbandoned && (e.claimOwner == "" || !now.Before(e.claimUntil))
	}
	return false
}

// keepLonger raises the retentions e's attempt asked for (Record.Retention,
// KeyRetention) to these, when they are longer.
func (e *entry) keepLonger(retention, keyRetention time.Duration) {
	e.rec.Retention, e.rec.KeyRetention = max(e.rec.Retention, retention), max(e.rec.KeyRetention, keyRetention)
}

// abandoned reports whether e is PROCESSING with its lease ended.
func (e *entry) abandoned(now time.Time) bool {
	return e.rec.State == store.StateProcessing && !now.Before(e.leaseUntil)
}

// view returns a copy of the record that the caller may keep. Its Result
// is read-only, as store.Record documents: its body is the frozen record's
// bytes, which the store never changes.
// A PROCESSING record whose lease ended is reported UNKNOWN, as the next
// Acquire would make it, unknown since its lease ended. TTL is the lease
// left of a PROCESSING record, 0 for an UNKNOWN one (kept until settled),
// the life left of a COMPLETED or EXPIRED one.
func (e *entry) view(now time.Time) store.Record {
	r := e.rec
	switch {
	case e.frozen:
		r.TTL = e.expires.Sub(now)
	case e.abandoned(now):
		r.State, r.Reason, r.CompletedAt = store.StateUnknown, store.ReasonAbandoned, e.leaseUntil
		r.TTL = 0
	case r.State == store.StateProcessing:
		r.TTL = e.leaseUntil.Sub(now)
	default:
		r.TTL = 0
	}
	return r
}
