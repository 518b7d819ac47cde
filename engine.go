package idem

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures an Engine. A nil *Options means all defaults.
type Options struct {
	// LeaseDuration is how long an attempt owns a key before another may take it
	// over, unless renewed. Zero means 30s.
	LeaseDuration time.Duration
	// Retention is how long a completed result is replayed. Zero means 24h.
	Retention time.Duration
	// RenewEvery is the heartbeat interval that extends a held lease while
	// work runs. Zero means a third of each lease; negative turns renewal
	// off. A lease shorter than RenewEvery renews at a third of itself.
	RenewEvery time.Duration
	// MaxResultBytes bounds a result body. Zero means 16 MiB.
	MaxResultBytes int
	// Logger receives one line per lost lease or failed finalize. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Observer receives events for metrics. Nil means none.
	Observer Observer
}

// Observer is told what the engine does, for metrics and traces. Its
// methods are called synchronously and must be fast.
type Observer interface {
	// StoreCall reports one store call: "acquire", "complete", "release",
	// "extend", "get" or "delete", made on ctx (for parenting trace spans).
	StoreCall(ctx context.Context, op string, elapsed time.Duration, err error)
	// LeaseEvent reports a renewal, a lost lease or an expired lease.
	LeaseEvent(id ID, ev LeaseEvent)
}

// LeaseEvent is what happened to a held lease.
type LeaseEvent uint8

const (
	LeaseRenewed LeaseEvent = iota + 1 // the heartbeat extended the lease
	LeaseLost                          // the store no longer holds the lease for this owner
	LeaseExpired                       // the deadline passed without a successful renewal
)

// String names the event.
func (ev LeaseEvent) String() string {
	switch ev {
	case LeaseRenewed:
		return "renewed"
	case LeaseLost:
		return "lost"
	case LeaseExpired:
		return "expired"
	}
	return fmt.Sprintf("LeaseEvent(%d)", uint8(ev))
}

// Engine runs work at most once per idempotency key on top of a Store.
// It is safe for concurrent use.
type Engine struct {
	store     Store
	lease     time.Duration
	retention time.Duration
	renew     time.Duration // as configured: 0 means a third of each lease, negative none
	maxResult int
	log       *slog.Logger
	obs       Observer
}

// New returns an engine over store.
func New(store Store, opts *Options) (*Engine, error) {
	if store == nil {
		return nil, errors.New("idem: New: nil store")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.LeaseDuration < 0 || o.Retention < 0 || o.MaxResultBytes < 0 {
		return nil, errors.New("idem: New: negative LeaseDuration, Retention or MaxResultBytes")
	}
	e := &Engine{store: store, lease: o.LeaseDuration, retention: o.Retention, renew: o.RenewEvery,
		maxResult: o.MaxResultBytes, log: o.Logger, obs: o.Observer}
	if e.lease == 0 {
		e.lease = 30 * time.Second
	}
	if e.lease < time.Millisecond {
		return nil, fmt.Errorf("idem: New: LeaseDuration %v is under the 1ms resolution of stores", e.lease)
	}
	if e.retention == 0 {
		e.retention = 24 * time.Hour
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

// Request names the key an attempt is for.
type Request struct {
	Tenant        string
	Key           string
	Fingerprint   string        // a digest of the request; reuse of Key with another one is a Mismatch
	LeaseDuration time.Duration // zero: the engine's
	Retention     time.Duration // zero: the engine's
}

// Outcome is what Begin decided.
type Outcome uint8

const (
	// Acquired: the caller holds a Lease and must do the work, then Complete
	// or Release it.
	Acquired Outcome = iota + 1
	// Replayed: the key is COMPLETED; Attempt.Result is the stored result.
	Replayed
	// InFlight: another attempt holds the key; Attempt.RetryAfter is the rest of its lease.
	InFlight
	// Mismatch: the key was used with a different fingerprint.
	Mismatch
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Acquired:
		return "acquired"
	case Replayed:
		return "replayed"
	case InFlight:
		return "in_flight"
	case Mismatch:
		return "mismatch"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Attempt is the answer of Begin: exactly one of its outcomes.
type Attempt struct {
	Outcome    Outcome
	Lease      *Lease        // Acquired
	Result     *Result       // Replayed; read-only, see Record.Result
	RetryAfter time.Duration // InFlight
	Record     Record        // the record that decided a Replayed, InFlight or Mismatch outcome
}

// Begin starts an attempt at req. On Acquired the lease's heartbeat runs
// until Complete or Release, and Lease.Context is cancelled when the lease
// can no longer be held. Errors wrap ErrInvalidKey, ErrInvalidTenant,
// ErrInvalidFingerprint or ErrStore; on any error nothing is held.
func (e *Engine) Begin(ctx context.Context, req Request) (Attempt, error) {
	if err := validate(req.ID()); err != nil {
		return Attempt{}, err
	}
	if err := ValidateFingerprint(req.Fingerprint); err != nil {
		return Attempt{}, err
	}
	// Stores count in whole milliseconds: the local deadline must not
	// outlast the store's by the truncated fraction.
	lease := orDefault(req.LeaseDuration, e.lease).Truncate(time.Millisecond)
	retention := orDefault(req.Retention, e.retention)
	if lease < time.Millisecond || retention < time.Millisecond {
		return Attempt{}, fmt.Errorf("%w: lease %v and retention %v must be at least 1ms", ErrInvalidRequest, lease, retention)
	}
	p := AcquireParams{ID: req.ID(), Owner: rand.Text(), Fingerprint: req.Fingerprint, LeaseDuration: lease}
	start := time.Now() // the local deadline counts from before the store saw the request
	res, err := e.acquire(ctx, p)
	if err != nil && ctx.Err() == nil {
		// The acquire may have taken the key before its reply was lost:
		// ask once more as the same owner, who then finds its own record.
		res, err = e.acquire(ctx, p)
	}
	if err != nil {
		if ctx.Err() != nil {
			e.releaseOrphan(ctx, p)
		}
		return Attempt{}, fmt.Errorf("%w: acquire: %w", ErrStore, err)
	}
	rec := res.Record
	// A PROCESSING record with our owner token is ours: the token is random
	// and made for this attempt, so only our own earlier try can have written it.
	if res.Acquired || (rec.State == StateProcessing && rec.Owner == p.Owner) {
		ref := LeaseRef{ID: p.ID, Owner: p.Owner, Fence: rec.Fence}
		return Attempt{Outcome: Acquired, Lease: e.hold(ctx, ref, start, lease, retention)}, nil
	}
	switch {
	case rec.Fingerprint != req.Fingerprint:
		return Attempt{Outcome: Mismatch, Record: rec}, nil
	case rec.State == StateCompleted:
		return Attempt{Outcome: Replayed, Result: rec.Result, Record: rec}, nil
	default:
		return Attempt{Outcome: InFlight, RetryAfter: rec.TTL, Record: rec}, nil
	}
}

// orphanTimeout bounds the cleanup after an acquire whose caller gave up.
const orphanTimeout = time.Second

// releaseOrphan undoes an acquire that may have taken the key although its
// caller's context ended first (a timed-out acquire that in fact took the
// lock): nobody would ever complete or release that lease, and the key
// would stay PROCESSING until it ran out. It looks for a record with the
// attempt's own owner token and releases it, on a short detached context.
func (e *Engine) releaseOrphan(ctx context.Context, p AcquireParams) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orphanTimeout)
	defer cancel()
	rec, err := e.store.Get(ctx, p.ID)
	if err != nil || rec.State != StateProcessing || rec.Owner != p.Owner {
		return
	}
	start := time.Now()
	err = e.store.Release(ctx, LeaseRef{ID: p.ID, Owner: p.Owner, Fence: rec.Fence})
	e.observe(ctx, "release", start, err)
}

// ID returns the request's tenant and key.
func (r Request) ID() ID { return ID{Tenant: r.Tenant, Key: r.Key} }

// Get returns the record of a key, for inspection; ErrNotFound when absent.
func (e *Engine) Get(ctx context.Context, id ID) (Record, error) {
	if err := validate(id); err != nil {
		return Record{}, err
	}
	start := time.Now()
	rec, err := e.store.Get(ctx, id)
	e.observe(ctx, "get", start, err)
	if err != nil && !errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("%w: get: %w", ErrStore, err)
	}
	return rec, err
}

// Delete invalidates a key in any state and reports whether it existed.
// A lease on it is lost: its owner can no longer complete it.
func (e *Engine) Delete(ctx context.Context, id ID) (bool, error) {
	if err := validate(id); err != nil {
		return false, err
	}
	start := time.Now()
	ok, err := e.store.Delete(ctx, id)
	e.observe(ctx, "delete", start, err)
	if err != nil {
		return false, fmt.Errorf("%w: delete: %w", ErrStore, err)
	}
	return ok, nil
}

func (e *Engine) acquire(ctx context.Context, p AcquireParams) (AcquireResult, error) {
	start := time.Now()
	res, err := e.store.Acquire(ctx, p)
	e.observe(ctx, "acquire", start, err)
	return res, err
}

func (e *Engine) observe(ctx context.Context, op string, start time.Time, err error) {
	if e.obs != nil {
		e.obs.StoreCall(ctx, op, time.Since(start), err)
	}
}

func (e *Engine) leaseEvent(id ID, ev LeaseEvent) {
	if e.obs != nil {
		e.obs.LeaseEvent(id, ev)
	}
}

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

// Lease is the right to do the work for one key, held by one attempt.
// Call exactly one of Complete or Release when the work ends.
type Lease struct {
	e         *Engine
	ref       LeaseRef
	lease     time.Duration
	retention time.Duration
	renew     time.Duration // the heartbeat interval; negative: no renewal

	ctx    context.Context // the work's context: cancelled when the lease can no longer be held
	cancel context.CancelCauseFunc

	start    time.Time    // before the acquire was sent; carries the monotonic clock
	deadline atomic.Int64 // the local lease deadline, in nanoseconds since start

	// The heartbeat is one timer, not a goroutine: most work ends before
	// the first renewal is due, and then the lease cost nothing but the timer.
	hb          sync.Mutex // guards the heartbeat's state; not held during the store call
	hbTimer     *time.Timer
	hbStopped   bool
	hbCallAbort context.CancelFunc // aborts the renewal in flight, if any

	mu     sync.Mutex // serialises Complete and Release
	closed bool
}

// errLeaseFinished is the cause of a lease context after Complete or Release.
var errLeaseFinished = errors.New("idem: lease finished")

func (e *Engine) hold(parent context.Context, ref LeaseRef, start time.Time, lease, retention time.Duration) *Lease {
	ctx, cancel := context.WithCancelCause(parent)
	renew := e.renew // a lease shorter than the configured interval renews at a third of itself
	if renew == 0 || renew >= lease {
		renew = lease / 3
	}
	l := &Lease{e: e, ref: ref, lease: lease, retention: retention, renew: renew, ctx: ctx, cancel: cancel, start: start}
	l.deadline.Store(int64(lease))
	l.hb.Lock()
	l.hbTimer = time.AfterFunc(l.nextBeat(), l.beat)
	l.hb.Unlock()
	return l
}

// Ref returns the owner and fencing token of the lease. Pass the fence to
// every write the work makes (see the guardrail in store/pgstore), so a
// store can refuse writes of a stale owner.
func (l *Lease) Ref() LeaseRef { return l.ref }

// Fence returns the lease's fencing token.
func (l *Lease) Fence() int64 { return l.ref.Fence }

// Context returns the context for the work: it is cancelled when Begin's
// context is, when the store reports the lease lost (cause ErrLeaseLost),
// when the lease deadline passes without renewal (cause ErrLeaseExpired),
// and after Complete or Release. Use context.Cause to tell them apart.
func (l *Lease) Context() context.Context { return l.ctx }

// Check reports whether the lease is still held, by the local clock, right
// now: nil, or ErrLeaseExpired when the deadline has passed, or the cause
// that ended Context. Call it just before a side effect: a worker that was
// paused (GC, SIGSTOP, a stalled call) sees its lease is over here even
// before the heartbeat has run to cancel Context.
func (l *Lease) Check() error {
	if err := l.ctx.Err(); err != nil {
		return context.Cause(l.ctx)
	}
	if l.untilDeadline() <= 0 {
		return ErrLeaseExpired
	}
	return nil
}

func (l *Lease) untilDeadline() time.Duration {
	return time.Duration(l.deadline.Load()) - time.Since(l.start)
}

// nextBeat is when the heartbeat next has something to do: renew, or, when
// renewal is off or the deadline comes first, end the lease.
func (l *Lease) nextBeat() time.Duration {
	left := l.untilDeadline()
	if l.renew > 0 && l.renew < left {
		return l.renew
	}
	return max(left, 0)
}

// beat runs on the heartbeat timer: it extends the lease, and cancels the
// work's context when the lease is lost or its deadline passes. The deadline
// is kept by the local monotonic clock, counted from before the store saw
// the request, so it never ends later than the store's.
func (l *Lease) beat() {
	l.hb.Lock()
	defer l.hb.Unlock()
	if l.hbStopped || l.ctx.Err() != nil {
		return
	}
	if l.untilDeadline() <= 0 {
		l.e.log.Warn("idem: lease expired before renewal", "tenant", l.ref.Tenant, "key", l.ref.Key, "fence", l.ref.Fence)
		l.e.leaseEvent(l.ref.ID, LeaseExpired)
		l.cancel(ErrLeaseExpired)
		return
	}
	callCtx, abort := context.WithDeadline(l.ctx, l.start.Add(time.Duration(l.deadline.Load())))
	l.hbCallAbort = abort
	sent := time.Now()
	l.hb.Unlock() // stop may run meanwhile: it aborts the call
	err := l.e.store.Extend(callCtx, ExtendParams{LeaseRef: l.ref, LeaseDuration: l.lease})
	l.hb.Lock()
	abort()
	l.hbCallAbort = nil
	l.e.observe(l.ctx, "extend", sent, err)
	switch {
	case l.hbStopped || l.ctx.Err() != nil:
		return
	case err == nil:
		l.deadline.Store(int64(sent.Sub(l.start) + l.lease))
		l.e.leaseEvent(l.ref.ID, LeaseRenewed)
	case errors.Is(err, ErrLeaseLost):
		l.e.log.Warn("idem: lease lost during work", "tenant", l.ref.Tenant, "key", l.ref.Key, "fence", l.ref.Fence)
		l.e.leaseEvent(l.ref.ID, LeaseLost)
		l.cancel(ErrLeaseLost)
		return
	default: // a store hiccup: try again at the next beat, until the deadline
		l.e.log.Warn("idem: lease renewal failed", "tenant", l.ref.Tenant, "key", l.ref.Key, "err", err)
	}
	l.hbTimer.Reset(l.nextBeat())
}

// stop ends the heartbeat. A renewal in flight is aborted and its answer
// ignored; should it still land, it cannot touch a record that was completed
// or released since, because the owner and fence no longer match a
// PROCESSING record.
func (l *Lease) stop() {
	l.hb.Lock()
	defer l.hb.Unlock()
	l.hbStopped = true
	l.hbTimer.Stop()
	if l.hbCallAbort != nil {
		l.hbCallAbort()
	}
}

// finalizeBackoff bounds how often Complete and Release retry a store
// error. Retrying is safe: both are idempotent for the same owner and fence,
// and giving up early would leave the key PROCESSING until its lease ends.
var finalizeBackoff = []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond}

// Complete stores res as the result of the key, to be replayed to every
// later attempt, if this lease still holds the key. It returns ErrLeaseLost
// (and changes nothing) when another owner took the key over, and
// ErrResultTooLarge (keeping the lease, so the caller can Release) when the
// body is over the limit. Store errors are retried a few times.
func (l *Lease) Complete(ctx context.Context, res Result) error {
	if len(res.Body) > l.e.maxResult {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrResultTooLarge, len(res.Body), l.e.maxResult)
	}
	return l.finalize(ctx, "complete", func(ctx context.Context) error {
		return l.e.store.Complete(ctx, CompleteParams{LeaseRef: l.ref, Result: res, Retention: l.retention})
	})
}

// Release deletes the key so that a retry can run the work again, if this
// lease still holds it. Use it after a failure that did not take effect.
func (l *Lease) Release(ctx context.Context) error {
	return l.finalize(ctx, "release", func(ctx context.Context) error {
		return l.e.store.Release(ctx, l.ref)
	})
}

func (l *Lease) finalize(ctx context.Context, op string, call func(context.Context) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrLeaseClosed
	}
	l.stop()
	var err error
	for i, wait := range finalizeBackoff {
		if wait > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %s: %w", ErrStore, op, errors.Join(err, ctx.Err()))
			case <-time.After(wait):
			}
		}
		start := time.Now()
		err = call(ctx)
		l.e.observe(ctx, op, start, err)
		if i > 0 && op == "release" && errors.Is(err, ErrLeaseLost) {
			// An earlier try failed without an answer and may have landed:
			// the record is gone or not ours either way, so the release
			// holds; counting it as a lost lease would be a false alarm.
			err = nil
		}
		if err == nil || errors.Is(err, ErrLeaseLost) || ctx.Err() != nil {
			break
		}
	}
	switch {
	case err == nil:
		l.closed = true
		l.cancel(errLeaseFinished)
		return nil
	case errors.Is(err, ErrLeaseLost):
		l.closed = true
		l.cancel(ErrLeaseLost)
		l.e.log.Warn("idem: lease lost at "+op+"; the record of the new owner was left untouched",
			"tenant", l.ref.Tenant, "key", l.ref.Key, "fence", l.ref.Fence)
		l.e.leaseEvent(l.ref.ID, LeaseLost)
		return fmt.Errorf("%s: %w", op, ErrLeaseLost)
	default:
		l.e.log.Error("idem: "+op+" failed; the key stays PROCESSING until its lease ends",
			"tenant", l.ref.Tenant, "key", l.ref.Key, "fence", l.ref.Fence, "err", err)
		return fmt.Errorf("%w: %s: %w", ErrStore, op, err)
	}
}

// FinalizeTimeout bounds the Complete or Release that Do makes after the
// work, on a context detached from the caller's: work that ran must be
// recorded even when the caller has gone.
const FinalizeTimeout = 10 * time.Second

// Do runs fn at most once per key and returns its output; a later call with
// the same key gets the stored output back with replayed true, without
// running fn. fn gets the lease's context and fencing token.
//
// If fn returns an error the key is released, so a later call runs fn again,
// and the error is returned. If fn panics the key is released and the panic
// goes on. Another call in flight gives an *InFlightError (ErrInFlight); a
// different fingerprint gives ErrMismatch. A lease lost before the output
// was stored returns the output together with an error wrapping ErrLeaseLost:
// the work ran, but another attempt may run it too.
func (e *Engine) Do(ctx context.Context, req Request, fn func(ctx context.Context, fence int64) ([]byte, error)) (out []byte, replayed bool, err error) {
	att, err := e.Begin(ctx, req)
	if err != nil {
		return nil, false, err
	}
	switch att.Outcome {
	case Replayed:
		// A copy: the stored body is shared (Record.Result), and the
		// caller owns what Do returns.
		return bytes.Clone(att.Result.Body), true, nil
	case InFlight:
		return nil, false, &InFlightError{RetryAfter: att.RetryAfter}
	case Mismatch:
		return nil, false, ErrMismatch
	}
	l := att.Lease
	// finalCtx bounds the Complete or Release after the work: its timeout
	// starts when fn returns, however long fn took.
	finalCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), FinalizeTimeout)
	}
	completed := false
	defer func() {
		if !completed { // fn failed or panicked
			fctx, cancel := finalCtx()
			defer cancel()
			if rerr := l.Release(fctx); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
				e.log.Error("idem: release after failed work", "tenant", req.Tenant, "key", req.Key, "err", rerr)
			}
		}
	}()
	out, err = fn(l.Context(), l.Fence())
	if err != nil {
		return nil, false, err
	}
	completed = true
	fctx, cancel := finalCtx()
	defer cancel()
	if err := l.Complete(fctx, Result{Body: out}); err != nil {
		if errors.Is(err, ErrResultTooLarge) {
			completed = false
		}
		return out, false, err
	}
	return out, false, nil
}
