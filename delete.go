package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/store"
)

// Delete invalidates a COMPLETED key, or its tombstone (EXPIRED), so that
// the next attempt with it runs anew, and reports whether there was a record. It refuses, changing
// nothing, a key whose work may be running or may have run without a
// known result: a PROCESSING key gets an *InFlightError (errors.Is
// ErrInFlight), an UNKNOWN one (or a PROCESSING one whose lease ended) an
// *OutcomeUnknownError (errors.Is ErrOutcomeUnknown): Resolve settles it with the
// operator's word on what happened. The check and the deletion are one
// step: Delete removes only the record it checked (by its fence), never a
// newer attempt's. ForceDelete deletes in any state.
func (e *Engine) Delete(ctx context.Context, id ID) (bool, error) {
	if err := validate(id); err != nil {
		return false, err
	}
	// A new acquisition mints a new fence, so the record checked is the
	// record deleted. A record that changed in between is looked at again.
	const tries = 3
	for range tries {
		rec, err := e.Get(ctx, id)
		switch {
		case err != nil:
			if errors.Is(err, ErrNotFound) {
				return false, nil
			}
			return false, err
		case rec.State == StateProcessing:
			return false, &InFlightError{RetryAfter: rec.TTL}
		case rec.State != StateCompleted && rec.State != StateExpired:
			return false, &OutcomeUnknownError{Record: rec}
		}
		ok, err := e.delete(ctx, store.DeleteParams{ID: id, Fence: rec.Fence})
		if err != nil || ok {
			return ok, err
		}
	}
	return false, &InFlightError{RetryAfter: time.Second} // attempts keep replacing the record: busy
}

// ForceDelete deletes a key in any state and reports whether there was a
// record. A lease on it is lost: its owner can no longer complete it. A
// key that was PROCESSING or UNKNOWN is then run again by the next
// attempt, although its work may be running or may have run: use it only
// when that is what is wanted (Resolve settles an UNKNOWN key).
func (e *Engine) ForceDelete(ctx context.Context, id ID) (bool, error) {
	if err := validate(id); err != nil {
		return false, err
	}
	return e.delete(ctx, store.DeleteParams{ID: id})
}

// delete deletes the record (of p.Fence, when set) and drops what this
// engine holds for the key (Options.MaxHeld): a held write was its owner's,
// and the key is no longer that lease's.
func (e *Engine) delete(ctx context.Context, p store.DeleteParams) (bool, error) {
	e.held.forget(p.ID)
	cctx := e.callCtx(ctx)
	defer cctx.end()
	start := time.Now()
	ok, err := e.store.Delete(cctx, p)
	e.observe(ctx, "delete", start, err)
	if err != nil {
		return false, fmt.Errorf("%w: delete: %w", ErrStore, e.explain(cctx, err))
	}
	return ok, nil
}
