package check

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// recStore records every call an engine makes to its store: the history
// the model checks is the store's, as the engines used it.
type recStore struct {
	s   store.Store
	rec *Recorder
	// timed is false when the store's clock jumps: the recorded lease
	// lengths are then zero, and the model lets a lease end at any time.
	timed bool
}

func keyOf(id store.ID) string { return id.Tenant + "/" + id.Key }

func (r *recStore) lease(d time.Duration) int64 {
	if !r.timed {
		return 0
	}
	return int64(d)
}

// classify turns a store error into an output: the refusals the Store
// interface names, or a failure whose outcome is unknown (Info).
func classify(err error) Output {
	switch {
	case err == nil:
		return Output{}
	case errors.Is(err, idem.ErrLeaseLost):
		return Output{Err: "lost"}
	case errors.Is(err, idem.ErrNotFound):
		return Output{Err: "notfound"}
	case errors.Is(err, idem.ErrNotUnknown):
		return Output{Err: "notunknown"}
	case errors.Is(err, idem.ErrStaleFence):
		return Output{Err: "stale"}
	case errors.Is(err, store.ErrStoreFull):
		return Output{Fail: true, Detail: err.Error()}
	}
	return Output{Info: true, Detail: err.Error()}
}

func viewOf(rec store.Record) *View {
	v := &View{Owner: rec.Owner, Fence: rec.Fence, FP: rec.Fingerprint}
	switch rec.State {
	case store.StateProcessing:
		v.State = 'P'
	case store.StateCompleted:
		v.State = 'C'
		if rec.Result != nil {
			v.Result = EncodeResult(rec.Result.Status, rec.Result.Header, rec.Result.Body)
		}
	case store.StateUnknown:
		v.State, v.Reason = 'U', rec.Reason
	default:
		v.State = '?'
	}
	return v
}

func (r *recStore) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	lane, call := r.rec.begin()
	res, err := r.s.Acquire(ctx, p)
	out := classify(err)
	if out.Err != "" {
		// Acquire refuses nothing: an ErrLeaseLost here is that of the
		// release of an acquisition that failed closed (ReplicaAcks), and
		// what the acquire did is unknown.
		out = Output{Info: true, Detail: err.Error()}
	}
	in := Input{Kind: KAcquire, Key: keyOf(p.ID), Owner: p.Owner, FP: p.Fingerprint,
		TakeOver: p.TakeOver, Lease: r.lease(p.LeaseDuration)}
	if err == nil && !res.Acquired && res.Record.Owner == p.Owner {
		// The answer is a record of this very owner token, which only an
		// earlier try of this acquire made: the store retried within the
		// call (pgstore does after a lost reply), and other calls may have
		// seen and changed that record between its tries (turned it
		// UNKNOWN as abandoned). Such a call is not one atomic step but
		// two: an acquire whose outcome its caller did not learn, then a
		// read of the record, both within the call.
		readLane, _ := r.rec.begin()
		r.rec.end(readLane, call, Input{Kind: KGet, Key: keyOf(p.ID)}, Output{Rec: viewOf(res.Record)})
		r.rec.end(lane, call, in, Output{Info: true, Detail: "retried within the store call: answered with its own record"})
		return res, err
	}
	if err == nil {
		if res.Acquired {
			out.Acquired, out.Fence = true, res.Record.Fence
			if res.Takeover != nil {
				out.Took = res.Takeover.Fence
			}
		} else {
			out.Rec = viewOf(res.Record)
		}
	}
	r.rec.end(lane, call, in, out)
	return res, err
}

func (r *recStore) Complete(ctx context.Context, p store.CompleteParams) error {
	lane, call := r.rec.begin()
	err := r.s.Complete(ctx, p)
	r.rec.end(lane, call, Input{Kind: KComplete, Key: keyOf(p.ID), Owner: p.Owner, Fence: p.Fence,
		Result: EncodeResult(p.Result.Status, p.Result.Header, p.Result.Body)}, classify(err))
	return err
}

func (r *recStore) Extend(ctx context.Context, p store.ExtendParams) error {
	lane, call := r.rec.begin()
	err := r.s.Extend(ctx, p)
	r.rec.end(lane, call, Input{Kind: KExtend, Key: keyOf(p.ID), Owner: p.Owner, Fence: p.Fence,
		Lease: r.lease(p.LeaseDuration)}, classify(err))
	return err
}

func (r *recStore) Release(ctx context.Context, p store.LeaseRef) error {
	lane, call := r.rec.begin()
	err := r.s.Release(ctx, p)
	r.rec.end(lane, call, Input{Kind: KRelease, Key: keyOf(p.ID), Owner: p.Owner, Fence: p.Fence}, classify(err))
	return err
}

func (r *recStore) MarkUnknown(ctx context.Context, p store.MarkUnknownParams) error {
	lane, call := r.rec.begin()
	err := r.s.MarkUnknown(ctx, p)
	r.rec.end(lane, call, Input{Kind: KMarkUnknown, Key: keyOf(p.ID), Owner: p.Owner, Fence: p.Fence,
		Reason: p.Reason}, classify(err))
	return err
}

func (r *recStore) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	lane, call := r.rec.begin()
	res, err := r.s.Claim(ctx, p)
	out := classify(err)
	if err == nil {
		out.Claimed, out.Rec = res.Claimed, viewOf(res.Record)
	}
	r.rec.end(lane, call, Input{Kind: KClaim, Key: keyOf(p.ID), Owner: p.Owner, Lease: r.lease(p.LeaseDuration)}, out)
	return res, err
}

func (r *recStore) Resolve(ctx context.Context, p store.ResolveParams) error {
	lane, call := r.rec.begin()
	err := r.s.Resolve(ctx, p)
	in := Input{Kind: KResolve, Key: keyOf(p.ID), Fence: p.Fence, Claim: p.Claim}
	if p.Result != nil {
		in.HasResult, in.Result = true, EncodeResult(p.Result.Status, p.Result.Header, p.Result.Body)
	}
	r.rec.end(lane, call, in, classify(err))
	return err
}

// ListUnknown reads many keys; it is not recorded.
func (r *recStore) ListUnknown(ctx context.Context, p store.ListParams) (store.ListPage, error) {
	return r.s.ListUnknown(ctx, p)
}

func (r *recStore) Get(ctx context.Context, id store.ID) (store.Record, error) {
	lane, call := r.rec.begin()
	rec, err := r.s.Get(ctx, id)
	out := classify(err)
	if err == nil {
		out.Rec = viewOf(rec)
	}
	r.rec.end(lane, call, Input{Kind: KGet, Key: keyOf(id)}, out)
	return rec, err
}

func (r *recStore) Delete(ctx context.Context, p store.DeleteParams) (bool, error) {
	lane, call := r.rec.begin()
	existed, err := r.s.Delete(ctx, p)
	out := classify(err)
	out.Existed = existed
	r.rec.end(lane, call, Input{Kind: KDelete, Key: keyOf(p.ID), Fence: p.Fence}, out)
	return existed, err
}

var _ store.Store = (*recStore)(nil)
