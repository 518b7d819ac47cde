package idem

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/ctxtime"
	"github.com/idemkit/idem/store"
)

// The store operations that end an attempt, as Observer.StoreCall and
// HoldObserver name them.
const (
	opComplete    = "complete"
	opRelease     = "release"
	opMarkUnknown = "mark_unknown"
	// opReleaseOrphan releases a key that an acquire may have taken
	// although Begin failed (see Engine.releaseOrphan).
	opReleaseOrphan = "release_orphan"
)

// finalization is one Complete, MarkUnknown or Release of a lease, or the
// release of an orphan, as the engine tries it: while the caller waits,
// then, if the store did not take it, in the background (hold).
type finalization struct {
	op           string
	ref          store.LeaseRef // an orphan's fence is not known: it is read from the store
	fingerprint  string         // of the attempt, for answering its retries
	result       Result         // opComplete
	reason       string         // opMarkUnknown
	retention    time.Duration
	keyRetention time.Duration // opComplete, opMarkUnknown, opReleaseOrphan with takeover
	// takeover is set on an orphan's release when its acquire could take
	// over an ended attempt (AcquireParams.TakeOver).
	takeover bool
	// unanswered is set once a try failed without an answer: it may
	// have taken effect, and the next try may find its work done.
	unanswered atomic.Bool

	// Set when held.
	heldAt time.Time
	until  time.Time // a release is retried until then; zero (Complete, MarkUnknown): until stored or the lease lost
	size   int64     // what it costs the hold, in bytes
	// next is when it is tried again: an orphan whose acquire has not
	// landed is looked for once a maxRetryWait, not on every pass;
	// guarded by hold.mu.
	next time.Time
}

// drainOrder ranks the ops by what they carry, first what drains first
// when the store is back: a result, which a client already has, then an
// unknown outcome, then a release (a retry waits on it), then an orphan's
// release, which looks for a record that most often never landed.
var drainOrder = map[string]int{opComplete: 0, opMarkUnknown: 1, opRelease: 2, opReleaseOrphan: 3}

// drainsBefore orders held finalizations: by drainOrder, then oldest first.
func drainsBefore(a, b *finalization) int {
	return cmp.Or(cmp.Compare(drainOrder[a.op], drainOrder[b.op]), a.heldAt.Compare(b.heldAt))
}

// call tries the finalization once.
func (f *finalization) call(ctx context.Context, s store.Store) error {
	switch f.op {
	case opComplete:
		return s.Complete(ctx, store.CompleteParams{LeaseRef: f.ref, Result: f.result, Retention: f.retention, KeyRetention: f.keyRetention})
	case opMarkUnknown:
		return s.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: f.ref, Reason: f.reason, Retention: f.retention, KeyRetention: f.keyRetention})
	case opRelease:
		return s.Release(ctx, f.ref)
	}
	return releaseOrphan(ctx, s, f)
}

// outcome reads the answer to one try: nil when it is done, ErrLeaseLost
// when the key is no longer the lease's, or a store error.
func (f *finalization) outcome(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNotLanded):
		return err
	case !errors.Is(err, ErrLeaseLost):
		f.unanswered.Store(true)
		return err
	case f.op == opRelease && f.unanswered.Load():
		// An earlier try failed without an answer and may have landed:
		// the record is gone or not ours either way, so the release
		// holds; counting it as a lost lease would be a false alarm. A
		// repeated Complete or MarkUnknown needs no such care: the store
		// accepts it from the owner that made it (Store).
		return nil
	}
	return err
}

// errNotLanded says that an orphan's acquire has not taken the key, so
// far: the key has no record.
var errNotLanded = errors.New("idem: the acquire has not taken the key")

// landingWindow is how long the hold keeps looking for an orphan's record
// after finding none: an acquire that got no answer may still be in
// flight, in the socket of a paused server (it runs when the server
// resumes) or in a cut link's retransmissions.
const landingWindow = 10 * time.Second

// releaseOrphan deletes the record of f.ref.Owner's acquire if it is the
// PROCESSING record that acquire made, or that record turned UNKNOWN only
// because its lease ended (ReasonAbandoned): no work ran under it. When
// the acquire could take over an ended attempt (f.takeover), the record
// may carry that attempt's unknown outcome, which a release would erase
// and the next request would run again: it is marked UNKNOWN instead (or
// left so). With no record it returns errNotLanded. Anything else
// (another owner's record, one a reconciler claimed) is not its to touch,
// and it returns nil: there is nothing left to do.
func releaseOrphan(ctx context.Context, s store.Store, f *finalization) error {
	ref := f.ref
	rec, err := s.Get(ctx, ref.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		return errNotLanded
	case err != nil:
		return err
	case rec.Owner != ref.Owner:
		return nil
	case rec.State != StateProcessing && (rec.State != StateUnknown || rec.Reason != store.ReasonAbandoned):
		return nil
	case f.takeover && rec.State == StateUnknown:
		return nil // UNKNOWN already: so it stays
	}
	owned := store.LeaseRef{ID: ref.ID, Owner: ref.Owner, Fence: rec.Fence}
	if f.takeover {
		err = s.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: owned, Reason: reasonOrphanedTakeover,
			Retention: f.retention, KeyRetention: f.keyRetention})
	} else {
		err = s.Release(ctx, owned)
	}
	if errors.Is(err, ErrLeaseLost) {
		return nil // changed meanwhile (claimed, taken over): no longer an orphan to settle
	}
	return err
}

// reasonOrphanedTakeover is the Reason of a key whose acquire got no
// answer while it could take over an ended attempt: whether it did, and
// whether that attempt's work took effect, is not known.
const reasonOrphanedTakeover = "the store did not answer an acquire that may have taken over an attempt whose lease had ended"

// finalizeBackoff spaces the tries of a finalize while its caller waits,
// all within one StoreTimeout; what the store has not taken by then is
// held and retried in the background. Retrying is safe: every try is
// idempotent for the same owner and fence.
var finalizeBackoff = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond}

// finalizeNow tries f while the caller waits: a few times within one
// store timeout (or ctx, when it ends first).
func (e *Engine) finalizeNow(ctx context.Context, f *finalization) error {
	cctx := e.callCtx(ctx)
	defer cctx.end()
	var err error
	for _, wait := range finalizeBackoff {
		if wait > 0 && ctxtime.Sleep(cctx, wait) != nil {
			break
		}
		start := time.Now()
		err = f.outcome(f.call(cctx, e.store))
		e.observe(ctx, f.op, start, err)
		if err == nil || errors.Is(err, ErrLeaseLost) || cctx.Err() != nil {
			break
		}
	}
	return e.explain(cctx, err)
}

// timeoutError says that a store call got no answer within the store
// timeout.
type timeoutError struct {
	limit time.Duration
	err   error
}

func (e *timeoutError) Error() string {
	return "no answer within the store timeout of " + e.limit.String() + ": " + e.err.Error()
}

func (e *timeoutError) Unwrap() error { return e.err }

// cloneResult copies what the hold keeps of a result: the caller may
// reuse its header and body once Complete returns (CompleteParams).
func cloneResult(r Result) Result {
	out := Result{Status: r.Status, Body: slices.Clone(r.Body)}
	if r.Header != nil {
		out.Header = make(http.Header, len(r.Header))
		for k, vs := range maps.All(r.Header) {
			out.Header[k] = slices.Clone(vs)
		}
	}
	return out
}

// heldOverhead is what the hold counts for a finalization besides its
// strings, header and body: the struct, the map entries, the timer share.
const heldOverhead = 256

// cost is what f costs the hold, in bytes.
func (f *finalization) cost() int64 {
	n := heldOverhead + len(f.ref.Tenant) + len(f.ref.Key) + len(f.ref.Owner) + len(f.fingerprint) + len(f.reason) + len(f.result.Body)
	for k, vs := range f.result.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v) + 16
		}
	}
	return int64(n)
}
