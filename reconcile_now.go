package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/store"
)

// ErrNoReconcile is returned by Engine.Reconcile when Options.Reconcile
// is not set: there is no lookup to ask.
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
func (e *Engine) Reconcile(ctx context.Context, id store.ID) (Verdict, store.Record, error) {
	if e.reconcile == nil {
		return VerdictUnknown, store.Record{}, ErrNoReconcile
	}
	rec, err := e.Get(ctx, id)
	if err != nil {
		return VerdictUnknown, store.Record{}, err
	}
	if rec.State != store.StateUnknown {
		return VerdictUnknown, rec, fmt.Errorf("%w: it is %v", ErrNotUnknown, rec.State)
	}
	after, absent, err := e.reconcileKey(ctx, id, e.retention)
	switch {
	case err != nil:
		return VerdictUnknown, store.Record{}, err
	case absent:
		return VerdictNotExecuted, store.Record{}, nil
	case after.State == store.StateCompleted:
		return VerdictCompleted, after, nil
	}
	return VerdictUnknown, after, nil
}
