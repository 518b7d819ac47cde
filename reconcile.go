package idem

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/store"
)

// Verdict is what a reconciliation found out about a key whose outcome was
// unknown.
type Verdict uint8

const (
	// VerdictUnknown: still not known; the key stays UNKNOWN.
	VerdictUnknown Verdict = iota
	// VerdictCompleted: the work took effect; Resolution.Result is recorded
	// and replayed to every retry.
	VerdictCompleted
	// VerdictNotExecuted: the work provably did not take effect; the key
	// is released and the next attempt runs it.
	VerdictNotExecuted
)

// String names the verdict.
func (v Verdict) String() string {
	switch v {
	case VerdictUnknown:
		return "unknown"
	case VerdictCompleted:
		return "completed"
	case VerdictNotExecuted:
		return "not_executed"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Resolution is the answer of Options.Reconcile.
type Resolution struct {
	Verdict Verdict
	Result  Result // VerdictCompleted: the result to record and replay
}

// claimMargin is how much longer a reconciliation claim lasts than the
// Reconcile call it covers, so the claim outlives the call's timeout and
// the Resolve after it.
const claimMargin = 2 * time.Second

// reconcileKey asks Options.Reconcile about the UNKNOWN key id, under a
// claim that keeps every other process from asking at the same time, and
// records the answer. It returns the record as it is afterwards, or absent
// when the key was resolved not executed (here or by someone else). A
// failed Reconcile call is logged, and leaves the key UNKNOWN.
func (e *Engine) reconcileKey(ctx context.Context, id ID, retention, keyRetention time.Duration) (rec Record, absent bool, err error) {
	r, err := e.reconcileOnce(ctx, id, retention, keyRetention)
	if r.failed != nil {
		e.log.Warn("idem: reconciliation failed; the key stays UNKNOWN", "tenant", id.Tenant, "key", id.Key, "fence", r.rec.Fence, "err", r.failed)
	}
	return r.rec, r.absent, err
}

// reconciliation is what reconcileOnce did about one key.
type reconciliation struct {
	rec    Record // the record afterwards
	absent bool   // resolved not executed, here or by someone else
	asked  bool   // Reconcile was called: this process held the claim
	failed error  // the Reconcile call failed (or its answer was unusable): the key stays UNKNOWN
}

// reconcileOnce is reconcileKey without the log line: the sweep counts
// failures and logs once a pass. err is the store's.
func (e *Engine) reconcileOnce(ctx context.Context, id ID, retention, keyRetention time.Duration) (reconciliation, error) {
	claim := store.ClaimParams{ID: id, Owner: rand.Text(), LeaseDuration: e.reconcileTimeout + claimMargin}
	cctx := e.callCtx(ctx)
	start := time.Now()
	cr, err := e.store.Claim(cctx, claim)
	e.observe(ctx, "claim", start, err)
	err = e.explain(cctx, err)
	cctx.end()
	switch {
	case errors.Is(err, ErrNotFound):
		return reconciliation{absent: true}, nil
	case err != nil:
		return reconciliation{}, fmt.Errorf("%w: claim: %w", ErrStore, err)
	case !cr.Claimed: // completed, resolved, or another process is reconciling it now
		return reconciliation{rec: cr.Record}, nil
	}
	r := reconciliation{rec: cr.Record, asked: true}
	rctx, cancel := context.WithTimeout(ctx, e.reconcileTimeout)
	res, err := e.reconcile(rctx, r.rec)
	cancel()
	if err == nil && res.Verdict > VerdictNotExecuted {
		err = fmt.Errorf("idem: Reconcile answered %v", res.Verdict)
	}
	if err == nil && res.Verdict == VerdictCompleted && len(res.Result.Body) > e.maxResult {
		err = fmt.Errorf("%w: the reconciled result has %d bytes, the limit is %d", ErrResultTooLarge, len(res.Result.Body), e.maxResult)
	}
	if err != nil || res.Verdict == VerdictUnknown {
		r.failed = err
		e.reconciled(id, VerdictUnknown, err)
		return r, nil // the claim runs out; the next retry or sweep asks again
	}
	// The result is replayed, and the key remembered, at least as long as
	// the longer of its attempt's retentions (Record.Retention and
	// KeyRetention, as the UNKNOWN record once lived; TTL, from a store
	// that still gives such a record an end): set under the configuration
	// its request ran with (a route's retention, a reload's),
	// which a sweep's or an operator's (the engine's) may not be. With the
	// engine's retention alone a retry got 410 key_expired early; with its
	// key retention alone, the work ran again.
	life := max(r.rec.TTL, r.rec.Retention, r.rec.KeyRetention)
	retention = max(retention, life)
	p := store.ResolveParams{ID: id, Fence: r.rec.Fence, Claim: claim.Owner, Retention: retention, KeyRetention: max(keyRetention, life)}
	if res.Verdict == VerdictCompleted {
		p.Result = &res.Result
	}
	if err := e.resolve(ctx, p); err != nil {
		e.reconciled(id, VerdictUnknown, err)
		if errors.Is(err, ErrNotUnknown) || errors.Is(err, ErrLeaseLost) {
			// The owner completed it late, or our claim ran out and another
			// reconciled it: the store has the truth.
			rec, err := e.Get(ctx, id)
			if errors.Is(err, ErrNotFound) {
				return reconciliation{absent: true, asked: true}, nil
			}
			return reconciliation{rec: rec, asked: true}, err
		}
		return reconciliation{}, err
	}
	e.reconciled(id, res.Verdict, nil)
	if res.Verdict == VerdictNotExecuted {
		return reconciliation{absent: true, asked: true}, nil
	}
	r.rec.State, r.rec.Result, r.rec.TTL = StateCompleted, p.Result, retention
	return r, nil
}

func (e *Engine) resolve(ctx context.Context, p store.ResolveParams) error {
	cctx := e.callCtx(ctx)
	defer cctx.end()
	start := time.Now()
	err := e.store.Resolve(cctx, p)
	e.observe(ctx, "resolve", start, err)
	err = e.explain(cctx, err)
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNotUnknown) &&
		!errors.Is(err, ErrStaleFence) && !errors.Is(err, ErrLeaseLost) {
		err = fmt.Errorf("%w: resolve: %w", ErrStore, err)
	}
	return err
}

func (e *Engine) reconciled(id ID, v Verdict, err error) {
	if o, ok := e.obs.(ReconcileObserver); ok {
		o.Reconciled(id, v, err)
	}
}

// Resolve ends an UNKNOWN key by an operator's word: with res, the work
// took effect and res is recorded and replayed for the engine's retention
// or, when longer, as long as the UNKNOWN record would still have lived,
// and the key is remembered as long; with a nil res, the work did not take effect and the key is
// released, so the next attempt runs it. fence must be the UNKNOWN
// record's (Record.Fence), so that a resolution meant for one attempt
// never lands on another. It returns ErrNotFound, ErrNotUnknown or
// ErrStaleFence, changing nothing, when the key is absent, not UNKNOWN, or
// has another fence.
func (e *Engine) Resolve(ctx context.Context, id ID, fence int64, res *Result) error {
	if err := validate(id); err != nil {
		return err
	}
	if res != nil && len(res.Body) > e.maxResult {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrResultTooLarge, len(res.Body), e.maxResult)
	}
	p := store.ResolveParams{ID: id, Fence: fence, Result: res, Retention: e.retention, KeyRetention: e.keyRetention}
	if res != nil {
		// As a reconciliation does (reconcileOnce), for the same reason.
		rec, err := e.Get(ctx, id)
		if err != nil {
			return err
		}
		if rec.State == StateUnknown && rec.Fence == fence {
			life := max(rec.TTL, rec.Retention, rec.KeyRetention)
			p.Retention, p.KeyRetention = max(p.Retention, life), max(p.KeyRetention, life)
		}
	}
	err := e.resolve(ctx, p)
	if err == nil {
		v := VerdictNotExecuted
		if res != nil {
			v = VerdictCompleted
		}
		e.reconciled(id, v, nil)
	}
	return err
}

// ListUnknown returns one page of UNKNOWN keys, of p.Tenant or of all
// tenants (p.AllTenants), in a stable order; pass the page's Next as the
// next call's After. An After that is not the Next of a page of the same
// listing returns ErrInvalidCursor. Stores keep an index of UNKNOWN keys, so a page costs
// no scan of the store. A lease that ended with its key still PROCESSING
// (its owner crashed) is listed from its end, as UNKNOWN with reason
// abandoned, whether or not a retry has met it: ReconcileAll asks
// about it, and its Claim turns it UNKNOWN.
func (e *Engine) ListUnknown(ctx context.Context, p ListParams) (ListPage, error) {
	if p.Limit < 0 || p.Limit > store.MaxListLimit {
		return ListPage{}, fmt.Errorf("%w: list limit %d is not within 0..%d", ErrInvalidRequest, p.Limit, store.MaxListLimit)
	}
	if !p.AllTenants {
		if err := ValidateTenant(p.Tenant); err != nil {
			return ListPage{}, err
		}
	}
	if p.Limit == 0 {
		p.Limit = store.DefaultListLimit
	}
	cctx := e.callCtx(ctx)
	defer cctx.end()
	start := time.Now()
	page, err := e.store.ListUnknown(cctx, p)
	e.observe(ctx, "list_unknown", start, err)
	switch {
	case errors.Is(err, ErrInvalidCursor): // the caller's error, not the store's
		return ListPage{}, err
	case err != nil:
		return ListPage{}, fmt.Errorf("%w: list unknown: %w", ErrStore, e.explain(cctx, err))
	}
	return page, nil
}
