package idem

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoReconcile is returned by Engine.Reconcile and Engine.ReconcileAll
// when Options.Reconcile is not set: there is no lookup to ask.
var ErrNoReconcile = errors.New("idem: Options.Reconcile is not set")

// Reconcile asks Options.Reconcile about the UNKNOWN key id now, as a
// retry of it would (under the same claim, so that no other process asks
// at the same time), and records the answer: an operator's "reconcile
// now". It returns the verdict and the record as it is afterwards:
// VerdictCompleted with the COMPLETED record; VerdictNotExecuted, the key
// released, with the zero Record; or VerdictUnknown with the record as it
// stands, still UNKNOWN when the lookup said so or failed (Options.Logger
// and the ReconcileObserver are told why) or when another process is
// reconciling the key right now. It asks nothing and returns
// ErrNoReconcile, ErrNotFound or ErrNotUnknown when there is no lookup, no
// record, or a record that is not UNKNOWN.
func (e *Engine) Reconcile(ctx context.Context, id ID) (Verdict, Record, error) {
	if e.reconcile == nil {
		return VerdictUnknown, Record{}, ErrNoReconcile
	}
	rec, err := e.Get(ctx, id)
	if err != nil {
		return VerdictUnknown, Record{}, err
	}
	if rec.State != StateUnknown {
		return VerdictUnknown, rec, fmt.Errorf("%w: it is %v", ErrNotUnknown, rec.State)
	}
	after, absent, err := e.reconcileKey(ctx, id, e.retention, e.keyRetention)
	switch {
	case err != nil:
		return VerdictUnknown, Record{}, err
	case absent:
		return VerdictNotExecuted, Record{}, nil
	case after.State == StateCompleted:
		return VerdictCompleted, after, nil
	}
	return VerdictUnknown, after, nil
}
