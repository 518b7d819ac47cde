package idem

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/store"
)

// Engine runs work at most once per idempotency key on top of a Store.
// It is safe for concurrent use.
type Engine struct {
	store            store.Store
	lease            time.Duration
	retention        time.Duration
	keyRetention     time.Duration
	renew            time.Duration // as configured: 0 means a third of each lease, negative none
	maxResult        int
	log              *slog.Logger
	obs              Observer
	beganObs         BeginObserver // obs, when it is one
	takeover         TakeoverPolicy
	reconcile        func(ctx context.Context, rec Record) (Resolution, error)
	reconcileTimeout time.Duration
	storeTimeout     time.Duration
	held             *hold
	sweeper          *sweeper
	works            workTimes   // how long Do's work takes, for InFlightError.RetryAfter
	shut             atomic.Bool // Shutdown was called: Begin refuses
}

// New returns an engine over store.
func New(s Store, opts *Options) (*Engine, error) {
	if s == nil {
		return nil, errors.New("idem: New: nil store")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.LeaseDuration < 0 || o.Retention < 0 || o.KeyRetention < 0 || o.MaxResultBytes < 0 || o.StoreTimeout < 0 || o.MaxHeldBytes < 0 {
		return nil, errors.New("idem: New: negative LeaseDuration, Retention, MaxResultBytes, StoreTimeout or MaxHeldBytes")
	}
	if o.LeaseDuration > store.MaxDuration || o.Retention > store.MaxDuration || o.KeyRetention > store.MaxDuration {
		return nil, fmt.Errorf("idem: New: LeaseDuration %v, Retention %v and KeyRetention %v must each be at most %v (store.MaxDuration)",
			o.LeaseDuration, o.Retention, o.KeyRetention, store.MaxDuration)
	}
	e := &Engine{store: s, lease: o.LeaseDuration, retention: o.Retention, keyRetention: o.KeyRetention, renew: o.RenewEvery,
		maxResult: o.MaxResultBytes, log: o.Logger, obs: o.Observer,
		takeover: o.Takeover, reconcile: o.Reconcile, reconcileTimeout: o.ReconcileTimeout,
		storeTimeout: cmp.Or(o.StoreTimeout, DefaultStoreTimeout)}
	e.beganObs, _ = o.Observer.(BeginObserver)
	e.held = newHold(e, cmp.Or(o.MaxHeld, DefaultMaxHeld), cmp.Or(o.MaxHeldBytes, DefaultMaxHeldBytes))
	if o.Takeover > TakeoverRun || o.ReconcileTimeout < 0 {
		return nil, errors.New("idem: New: unknown Takeover policy or negative ReconcileTimeout")
	}
	var err error
	if e.sweeper, err = newSweeper(o); err != nil {
		return nil, err
	}
	if e.reconcileTimeout == 0 {
		e.reconcileTimeout = 5 * time.Second
	}
	if e.lease == 0 {
		e.lease = 30 * time.Second
	}
	if e.lease < time.Millisecond {
		return nil, fmt.Errorf("idem: New: LeaseDuration %v is under the 1ms resolution of stores", e.lease)
	}
	if e.retention == 0 {
		e.retention = 24 * time.Hour
	}
	if e.retention < time.Millisecond { // Begin refuses it on every request
		return nil, fmt.Errorf("idem: New: Retention %v is under the 1ms resolution of stores", e.retention)
	}
	if e.renew >= e.lease {
		return nil, fmt.Errorf("idem: New: RenewEvery %v must be shorter than LeaseDuration %v", e.renew, e.lease)
	}
	if e.maxResult == 0 {
		e.maxResult = 16 << 20
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	return e, nil
}

// Shutdown ends the engine's use, as http.Server.Shutdown ends a
// server's: every later Begin and Do fails with ErrShutdown (nothing is
// taken, nothing runs), the leases already held go on and finish as
// before, and Shutdown stores every finalization the engine holds (a
// Complete, MarkUnknown or Release the store did not take in time:
// Options.MaxHeld), waiting until none is held. Call it after the work
// that uses the engine has stopped (after your http.Server's Shutdown
// returned, or your consumer stopped) and before the process exits: what
// is held lives only in this process. When ctx ends first, Shutdown
// returns an error wrapping ctx's error that says how many are still
// held; their retries go on in the background (a Complete or MarkUnknown
// until the store takes it or says the lease is lost, within MaxHeld; a
// Release at most for the rest of its lease and FinalizeTimeout), and
// calling Shutdown again waits for them anew.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.shut.Store(true)
	return e.flushHeld(ctx)
}

// Retention is how long the engine keeps a completed result by default
// (Options.Retention), for servers that publish their expiry policy.
func (e *Engine) Retention() time.Duration { return e.retention }

// KeyRetention is how long the engine remembers a completed key by default
// (Options.KeyRetention); zero when it keeps no tombstones.
func (e *Engine) KeyRetention() time.Duration { return e.keyRetention }

// Request names the idempotency key an attempt is for, and says how a reuse
// of it is told from a retry.
type Request struct {
	Tenant string // the scope of Key: one client's keys never meet another's; may be empty
	Key    string
	// Fingerprint is a digest of the request the key was sent with (its
	// body, its method and path): a later use of the key with another
	// fingerprint gets Mismatch, never the stored result of a different
	// request.
	Fingerprint string
	// NoFingerprint says that the key alone names the work (a message ID,
	// a job ID), and a reuse of it with another payload is replayed. A
	// Request sets exactly one of Fingerprint and NoFingerprint, else Begin and Do
	// return ErrInvalidRequest: a forgotten fingerprint would silently
	// replay one request's result to another.
	NoFingerprint bool
	// Label says what the work is, kept in the key's record for an
	// operator (Record.Label): e.g. "POST /v1/orders route=orders".
	// Never a secret. Cut to 200 bytes (store.MaxLabelLength).
	Label         string
	LeaseDuration time.Duration // zero: the engine's
	Retention     time.Duration // zero: the engine's
	KeyRetention  time.Duration // zero: the engine's (Options.KeyRetention)
}

// Decision is what Begin decided.
type Decision uint8

const (
	// Acquired: the caller holds a Lease and must do the work, then Complete
	// or Release it (and defer its Close right away).
	Acquired Decision = iota + 1
	// Replayed: the key is COMPLETED; Attempt.Result is the stored result.
	Replayed
	// InFlight: another attempt holds the key; Attempt.RetryAfter is the rest of its lease.
	InFlight
	// Mismatch: the key was used with a different fingerprint.
	Mismatch
	// Unknown: the key is UNKNOWN: an earlier attempt may have had its
	// effect and no result is recorded, so the work must not run again.
	// Attempt.Record says which attempt (Fence) and why (Reason);
	// Attempt.RetryAfter is when asking again may find it reconciled, or
	// zero when only an operator's Resolve will.
	Unknown
	// Expired: the key completed, its result's retention ended and its
	// key retention did not (Options.KeyRetention): it is not run again,
	// and there is no result to replay. Attempt.Record says when it
	// completed (CompletedAt) and with which status (Result.Status).
	Expired
)

// String names the decision.
func (o Decision) String() string {
	switch o {
	case Acquired:
		return "acquired"
	case Replayed:
		return "replayed"
	case InFlight:
		return "in_flight"
	case Mismatch:
		return "mismatch"
	case Unknown:
		return "unknown"
	case Expired:
		return "expired"
	}
	return fmt.Sprintf("Decision(%d)", uint8(o))
}

// Attempt is the answer of Begin: exactly one Decision, and what goes with it.
type Attempt struct {
	Outcome    Decision
	Lease      *Lease        // Acquired
	Result     *Result       // Replayed; read-only, see Record.Result
	RetryAfter time.Duration // InFlight, Unknown
	Record     Record        // the record that decided a Replayed, InFlight, Mismatch, Unknown or Expired outcome
}

// Begin starts an attempt at key. On Acquired the lease's heartbeat runs
// until Complete or Release, and Lease.Context is cancelled when the lease
// can no longer be held. Errors wrap ErrInvalidKey, ErrInvalidTenant,
// ErrInvalidFingerprint, ErrInvalidRequest or ErrStore, or are
// ErrShutdown; on any error nothing is held.
func (e *Engine) Begin(ctx context.Context, req Request) (Attempt, error) {
	att, err := e.beginKey(ctx, req)
	if err == nil && e.beganObs != nil {
		fence := att.Record.Fence
		if att.Lease != nil {
			fence = att.Lease.Fence()
		}
		e.beganObs.Began(ctx, req.ID(), att.Outcome, fence)
	}
	return att, err
}

// beginKey is Begin without its report to a BeginObserver.
func (e *Engine) beginKey(ctx context.Context, req Request) (Attempt, error) {
	if e.shut.Load() {
		return Attempt{}, ErrShutdown
	}
	if err := validate(req.ID()); err != nil {
		return Attempt{}, err
	}
	if err := ValidateFingerprint(req.Fingerprint); err != nil {
		return Attempt{}, err
	}
	if (req.Fingerprint == "") == !req.NoFingerprint {
		return Attempt{}, fmt.Errorf("%w: a Request sets exactly one of Fingerprint and NoFingerprint", ErrInvalidRequest)
	}
	// Stores count in whole milliseconds: the local deadline must not
	// outlast the store's by the truncated fraction.
	lease := orDefault(req.LeaseDuration, e.lease).Truncate(time.Millisecond)
	retention := orDefault(req.Retention, e.retention)
	keyRetention := orDefault(req.KeyRetention, e.keyRetention)
	if lease < time.Millisecond || retention < time.Millisecond {
		return Attempt{}, fmt.Errorf("%w: lease %v and retention %v must be at least 1ms", ErrInvalidRequest, lease, retention)
	}
	if lease > store.MaxDuration || retention > store.MaxDuration || keyRetention > store.MaxDuration {
		return Attempt{}, fmt.Errorf("%w: lease %v, retention %v and key retention %v must each be at most %v",
			ErrInvalidRequest, lease, retention, keyRetention, store.MaxDuration)
	}
	if e.held.n.Load() > 0 {
		// This process holds the key's outcome that its store does not
		// have yet (Options.MaxHeld): it is the answer, unless the store
		// has moved past it (an operator deleted the key elsewhere and it
		// ran again under a higher fence: the held finalization is stale,
		// and its retry will find so). A store that does not answer does
		// not move it past: the held outcome stands.
		if att, fence, ok := e.held.answer(req.ID(), req.Fingerprint); ok {
			rec, err := e.Get(ctx, req.ID())
			if err != nil || rec.Fence <= fence {
				return att, nil
			}
			e.held.supersede(req.ID(), fence)
		}
	}
	p := store.AcquireParams{ID: req.ID(), Owner: rand.Text(), Fingerprint: req.Fingerprint, LeaseDuration: lease,
		Retention: retention, KeyRetention: keyRetention, TakeOver: e.takeover == TakeoverRun, Label: cut(req.Label, store.MaxLabelLength)}
	att, err := e.begin(ctx, p, keyRetention)
	if err != nil || att.Outcome != Unknown || e.reconcile == nil {
		return att, err
	}
	// Reconcile first: the answer may be the result to replay, or that
	// the work never ran, and then this attempt runs it.
	rec, absent, err := e.reconcileKey(ctx, att.Record.ID, retention, keyRetention)
	switch {
	case err != nil && !errors.Is(err, ErrStore):
		// The key changed under the reconciliation (deleted, resolved
		// by another): nothing ran, and a retry finds the new state.
		return Attempt{}, fmt.Errorf("%w: the key changed while it was reconciled: %w", ErrStore, err)
	case err != nil:
		return Attempt{}, err
	case absent: // resolved not executed, here or by another: run it (once; no second reconciliation)
		att, err = e.begin(ctx, p, keyRetention)
		if err == nil && att.Outcome == Unknown {
			att.RetryAfter = e.reconcileTimeout
		}
		return att, err
	}
	return e.decide(rec, req.Fingerprint), nil
}

// begin acquires the key (beginAs) and, when the only thing in the way is
// its own first try's record, releases that and acquires once more.
func (e *Engine) begin(ctx context.Context, p store.AcquireParams, keyRetention time.Duration) (Attempt, error) {
	att, err := e.beginAs(ctx, p, keyRetention)
	if err == nil && att.Outcome == Unknown && att.Record.Owner == p.Owner && att.Record.Reason == store.ReasonAbandoned {
		// The UNKNOWN record is our own first try's: it took the key, its
		// reply was lost, and the lease ended before the second try found
		// it (which turned it UNKNOWN). Nothing ran under it, since this
		// Begin never handed the lease out: release it and take the key
		// once more, under a new owner token.
		cctx := e.callCtx(ctx)
		start := time.Now()
		rerr := e.store.Release(cctx, store.LeaseRef{ID: p.ID, Owner: p.Owner, Fence: att.Record.Fence})
		e.observe(ctx, opRelease, start, rerr) // a store call like any other: counted and timed
		cctx.end()
		if rerr == nil {
			p.Owner = rand.Text()
			return e.beginAs(ctx, p, keyRetention)
		}
	}
	return att, err
}

// beginAs acquires the key as p.Owner, once more as the same owner after
// an error, and decides the outcome from the store's answer.
func (e *Engine) beginAs(ctx context.Context, p store.AcquireParams, keyRetention time.Duration) (Attempt, error) {
	start := time.Now()    // the local deadline counts from before the store saw the request
	cctx := e.callCtx(ctx) // one store timeout for both tries
	res, err := e.acquire(cctx, p)
	if lost := err; err != nil && cctx.Err() == nil {
		// The acquire may have taken the key before its reply was lost:
		// ask once more as the same owner, who then finds its own record.
		res, err = e.acquire(cctx, p)
		if err == nil && p.TakeOver && !res.Acquired && res.Record.State == StateProcessing && res.Record.Owner == p.Owner {
			// The first try took the key, and may have taken over an
			// ended attempt whose fence only its lost reply carried:
			// run without it, the work could run a second time. Settle
			// it as an orphaned takeover (UNKNOWN), as when no try is
			// answered.
			err = fmt.Errorf("the reply of an acquire that may have taken over an ended attempt was lost: %w", lost)
		}
	}
	timedOut := cctx.timedOut()
	cctx.end()
	if err != nil {
		if timedOut {
			err = &timeoutError{limit: e.storeTimeout, err: err}
		}
		e.releaseOrphan(ctx, p, keyRetention, start, timedOut, err)
		return Attempt{}, fmt.Errorf("%w: acquire: %w", ErrStore, err)
	}
	rec := res.Record
	// A PROCESSING record with our owner token is ours: the token is random
	// and made for this attempt, so only our own earlier try can have written it.
	if res.Acquired || (rec.State == StateProcessing && rec.Owner == p.Owner) {
		ref := store.LeaseRef{ID: p.ID, Owner: p.Owner, Fence: rec.Fence}
		return Attempt{Outcome: Acquired, Lease: e.hold(ctx, ref, p.Fingerprint, start, p.LeaseDuration, p.Retention, keyRetention, res.Takeover)}, nil
	}
	att := e.decide(rec, p.Fingerprint)
	if att.Outcome == InFlight && e.held.n.Load() > 0 && e.held.holds(rec.Owner) {
		// The attempt that holds the key has ended, and its release is
		// held here, retried now: come back soon, not at the lease's end.
		att.RetryAfter = min(att.RetryAfter, time.Second)
	}
	return att, nil
}

// decide is the outcome for an attempt that meets rec held by another.
func (e *Engine) decide(rec Record, fingerprint string) Attempt {
	switch {
	case rec.Fingerprint != fingerprint:
		return Attempt{Outcome: Mismatch, Record: rec}
	case rec.State == StateCompleted:
		return Attempt{Outcome: Replayed, Result: rec.Result, Record: rec}
	case rec.State == StateExpired:
		return Attempt{Outcome: Expired, Record: rec}
	case rec.State == StateUnknown:
		var after time.Duration
		if e.reconcile != nil {
			after = e.reconcileTimeout
		}
		return Attempt{Outcome: Unknown, RetryAfter: after, Record: rec}
	default:
		return Attempt{Outcome: InFlight, RetryAfter: rec.TTL, Record: rec}
	}
}

// releaseOrphan undoes an acquire that may have taken the key although
// Begin failed: a try got no answer in time (a timed-out acquire that in
// fact took the lock), its reply was lost, or the caller's context ended.
// Nobody would ever complete or release that lease: the key would stay
// PROCESSING until it ran out, then turn UNKNOWN, and a request that never
// ran would never run. It looks for a record with the attempt's own owner
// token and releases it: at once when the store answers, else (and when
// the store did not answer the acquire in time) held and retried in the
// background.
func (e *Engine) releaseOrphan(ctx context.Context, p store.AcquireParams, keyRetention time.Duration, start time.Time, timedOut bool, cause error) {
	f := &finalization{op: opReleaseOrphan, ref: store.LeaseRef{ID: p.ID, Owner: p.Owner}, takeover: p.TakeOver,
		retention: p.Retention, keyRetention: keyRetention}
	if !timedOut {
		// The store answered the acquire (with an error): what it took,
		// it took before answering.
		if cause = e.finalizeOnce(context.WithoutCancel(ctx), f); cause == nil || errors.Is(cause, errNotLanded) {
			return
		}
	}
	e.held.add(f, start.Add(p.LeaseDuration), cause)
}

// ID returns the key's tenant and key.
func (r Request) ID() ID { return ID{Tenant: r.Tenant, Key: r.Key} }

func validate(id ID) error {
	if err := ValidateTenant(id.Tenant); err != nil {
		return err
	}
	return ValidateKey(id.Key)
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
