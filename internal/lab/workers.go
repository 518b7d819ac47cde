package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// Worker answers, as an HTTP server would: errBusy is a 409, errUnavailable a 5xx.
var (
	errBusy        = errors.New("lab: 409 another request holds the key")
	errUnavailable = errors.New("lab: 503 try again")
	// errOutcomeUnknown is the answer for a key whose outcome is unknown
	// (idem's 503 outcome_unknown), as an *unknownAnswer.
	errOutcomeUnknown = errors.New("lab: 503 outcome unknown")
)

// unknownAnswer is a worker's answer that the key's work may have run and
// no result is known: it does not run it again. Retry says whether asking
// again can help (a reconciliation is configured); without one the key
// stays UNKNOWN for its retention, and the client stops.
type unknownAnswer struct {
	Retry  bool
	Reason string
}

func (e *unknownAnswer) Error() string { return errOutcomeUnknown.Error() + ": " + e.Reason }

// Is reports errOutcomeUnknown.
func (e *unknownAnswer) Is(target error) bool { return target == errOutcomeUnknown }

// gate freezes the request for one key on one worker, the way a GC
// pause, a stalled thread or SIGSTOP freezes it: while frozen, its code,
// its store calls (its lease heartbeat included) and its provider call all
// wait, so nothing it does reaches a server. Other keys on the same worker
// go on: a process-wide pause would also freeze them at random points,
// which mixes the vectors; stall-before and stall-after isolate one each.
type gate struct {
	mu    sync.Mutex
	until map[string]time.Time
}

func (g *gate) freeze(key string, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.until == nil {
		g.until = map[string]time.Time{}
	}
	if t := time.Now().Add(d); t.After(g.until[key]) {
		g.until[key] = t
	}
}

// wait blocks while key is frozen on this worker, or until ctx ends.
func (g *gate) wait(ctx context.Context, key string) {
	for {
		g.mu.Lock()
		d := time.Until(g.until[key])
		g.mu.Unlock()
		if d <= 0 {
			return
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return
		}
	}
}

// point is where in a request a pause can hit.
type point uint8

const (
	beforeProvider point = iota + 1 // the lease is held, the provider not called yet
	afterProvider                   // the provider charged, the result not finalized
)

// pausePlan freezes a worker at a point: the first attempt of every key
// to reach the point is frozen for For.
type pausePlan struct {
	At  point
	For time.Duration

	mu   sync.Mutex
	done map[string]bool
}

func (p *pausePlan) hit(at point, key string) time.Duration {
	if p == nil || p.At != at {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		p.done = map[string]bool{}
	}
	if p.done[key] {
		return 0
	}
	p.done[key] = true
	return p.For
}

// worker is one server process of the application.
type worker interface {
	Handle(ctx context.Context, key string) (string, error)
	Close()
}

// workerEnv is what every worker of a run shares.
type workerEnv struct {
	Tenant   string
	Prefix   string // Redis key prefix of the run
	Lease    time.Duration
	Provider *provider // the run's provider, whose calls the checker reads; nil in a worker process
	Pay      payments  // the provider as the workers reach it: Provider itself, or over HTTP
	// Reconcile makes the idem workers ask Pay about keys whose outcome is
	// unknown (Options.Reconcile).
	Reconcile  bool
	payURL     string        // the provider's server, when reached over HTTP (for worker processes)
	payTimeout time.Duration // the caller's timeout of one charge over HTTP; zero: none
	Ledger     Ledger
	Pause      *pausePlan
	NewRedis   func() *redis.Client // a new client of the run's Redis, as the worker's own
	Memory     store.Store          // the shared in-process store, for idem-memory
	Fenced     *atomic.Int64        // stale owners refused
	// Charged, when not nil, is called after the provider charged and
	// before the effect is committed: the pg scenarios inject faults here.
	// It returns the effect to commit, possibly wrapped.
	Charged func(ctx context.Context, key string, e Effect) Effect
}

// pausePoint freezes the worker if the plan says so and waits out the pause.
func pausePoint(ctx context.Context, env *workerEnv, g *gate, at point, key string) {
	if d := env.Pause.hit(at, key); d > 0 {
		g.freeze(key, d)
	}
	g.wait(ctx, key)
}

// naiveWorker is the pattern of the article: GET the stored response, else
// SET lock NX EX, call the provider, SET the response. With del it also
// DELetes the lock at the end without checking it still owns it (the
// non-atomic release bug).
type naiveWorker struct {
	id  int
	env *workerEnv
	rdb *redis.Client
	g   *gate
	del bool
}

func (w *naiveWorker) Handle(ctx context.Context, key string) (string, error) {
	lock, resp := w.env.Prefix+"lock:"+key, w.env.Prefix+"resp:"+key
	w.g.wait(ctx, key)
	if v, err := w.rdb.Get(ctx, resp).Result(); err == nil {
		return v, nil
	} else if !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("%w: %w", errUnavailable, err)
	}
	w.g.wait(ctx, key)
	ok, err := w.rdb.SetNX(ctx, lock, w.id, w.env.Lease).Result()
	if err != nil {
		return "", fmt.Errorf("%w: %w", errUnavailable, err)
	}
	if !ok {
		return "", errBusy
	}
	pausePoint(ctx, w.env, w.g, beforeProvider, key)
	eff, err := w.env.Ledger.Begin(ctx, w.env.Tenant, key, 0)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errUnavailable, err)
	}
	w.g.wait(ctx, key)
	charge, err := w.env.Pay.Charge(ctx, w.id, key, 0)
	if err != nil {
		eff.Abort(ctx)
		if w.del {
			w.g.wait(ctx, key)
			w.rdb.Del(ctx, lock)
		}
		return "", fmt.Errorf("%w: %w", errUnavailable, err)
	}
	pausePoint(ctx, w.env, w.g, afterProvider, key)
	if err := eff.Commit(ctx, charge); err != nil {
		return "", fmt.Errorf("%w: %w", errUnavailable, err)
	}
	w.g.wait(ctx, key)
	if err := w.rdb.Set(ctx, resp, charge, time.Hour).Err(); err != nil {
		return "", fmt.Errorf("%w: %w", errUnavailable, err)
	}
	if w.del {
		w.rdb.Del(ctx, lock)
	}
	return charge, nil
}

func (w *naiveWorker) Close() {
	if w.rdb != nil {
		w.rdb.Close()
	}
}

// idemWorker serves requests with an idem.Engine over its own store
// client. It checks the lease right before the provider call, passes the
// fence along, and with a guarded ledger writes the key's row first.
type idemWorker struct {
	id  int
	env *workerEnv
	eng *idem.Engine
	g   *gate
	rdb *redis.Client // nil for idem-memory
}

func (w *idemWorker) Handle(ctx context.Context, key string) (string, error) {
	w.g.wait(ctx, key)
	att, err := w.eng.Begin(ctx, idem.Request{Tenant: w.env.Tenant, Key: key, Fingerprint: "charge"})
	if err != nil {
		return "", fmt.Errorf("%w: %w", errUnavailable, err)
	}
	switch att.Outcome {
	case idem.Replayed:
		return string(att.Result.Body), nil
	case idem.InFlight:
		return "", errBusy
	case idem.Mismatch:
		return "", fmt.Errorf("lab: 422 fingerprint mismatch for %s", key)
	case idem.Expired: // the lab keeps no tombstones (no KeyRetention); never run it again
		return "", fmt.Errorf("lab: 410 key expired for %s", key)
	case idem.Unknown:
		// An earlier attempt may have charged: never charge again unasked.
		return "", &unknownAnswer{Retry: att.RetryAfter > 0, Reason: att.Record.Reason}
	}
	l := att.Lease
	final := context.WithoutCancel(ctx)
	refuse := func(err error) (string, error) {
		w.env.Fenced.Add(1)
		l.Release(final)
		return "", fmt.Errorf("%w: %w", errUnavailable, err)
	}
	pausePoint(ctx, w.env, w.g, beforeProvider, key)
	if err := l.Check(); err != nil {
		return refuse(err)
	}
	eff, err := w.env.Ledger.Begin(l.Context(), w.env.Tenant, key, l.Fence())
	var dup *DuplicateError
	switch {
	case errors.As(err, &dup):
		// Another owner's effect is committed: finish the key with its result.
		if err := l.Complete(final, store.Result{Body: []byte(dup.Charge)}); errors.Is(err, idem.ErrLeaseLost) {
			w.env.Fenced.Add(1)
		}
		return dup.Charge, nil
	case errors.Is(err, ErrStaleFence):
		return refuse(err)
	case err != nil:
		l.Release(final)
		return "", fmt.Errorf("%w: %w", errUnavailable, err)
	}
	// A freeze takes hold at the worker's I/O points (the gate); the lease
	// is checked after the last one, right before the charge. The row
	// insert above may also have waited on another owner.
	w.g.wait(ctx, key)
	if err := l.Check(); err != nil {
		eff.Abort(final)
		return refuse(err)
	}
	// The call runs under the lease: it is cut when the lease ends.
	charge, err := w.env.Pay.Charge(l.Context(), w.id, key, l.Fence())
	if errors.Is(err, idem.ErrOutcomeUnknown) {
		// The request reached the provider, or may have, and no answer
		// came back: it may have charged. Releasing would charge again.
		eff.Abort(final)
		w.g.wait(ctx, key)
		if err := l.MarkUnknown(final, err.Error()); errors.Is(err, idem.ErrLeaseLost) {
			w.env.Fenced.Add(1)
		}
		return "", &unknownAnswer{Retry: w.env.Reconcile, Reason: err.Error()}
	}
	if err != nil {
		eff.Abort(final)
		w.g.wait(ctx, key)
		if err := l.Release(final); errors.Is(err, idem.ErrLeaseLost) {
			w.env.Fenced.Add(1)
		}
		return "", fmt.Errorf("%w: %w", errUnavailable, err)
	}
	pausePoint(ctx, w.env, w.g, afterProvider, key)
	if w.env.Charged != nil {
		eff = w.env.Charged(ctx, key, eff)
	}
	// The charge happened: record it even if the lease is gone meanwhile.
	if err := eff.Commit(final, charge); err != nil {
		// The COMMIT may have landed (its reply was lost) or not (the
		// backend died): the ledger says which. Either way the charge was
		// made, so the key is never released for a retry to charge again.
		if ch, ok := w.env.Ledger.Committed(final, w.env.Tenant, key, l.Fence()); !ok || ch != charge {
			if err := l.MarkUnknown(final, "ledger commit failed after the charge"); errors.Is(err, idem.ErrLeaseLost) {
				w.env.Fenced.Add(1)
			}
			return "", &unknownAnswer{Retry: w.env.Reconcile, Reason: "ledger commit failed after the charge: " + err.Error()}
		}
	}
	err = l.Complete(final, store.Result{Body: []byte(charge)})
	switch {
	case errors.Is(err, idem.ErrLeaseLost):
		w.env.Fenced.Add(1) // the store refused the stale owner's result
	case err != nil:
		return "", fmt.Errorf("%w: %w", errUnavailable, err)
	}
	return charge, nil
}

// Close stores what the engine holds (a finalization the store did not
// take in time) before the store client closes, as the gateway does at
// shutdown. A held finalization is dropped when its lease and
// FinalizeTimeout have both passed, so the wait is bounded by them.
func (w *idemWorker) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), idem.FinalizeTimeout+w.env.Lease+time.Second)
	defer cancel()
	// An error means the wait ran out with finalizations still held: the
	// run's verdict reads every key's stored state, so what they would have
	// stored is judged there, not here.
	_ = w.eng.Shutdown(ctx)
	if w.rdb != nil {
		w.rdb.Close()
	}
}

// gatedStore is a worker's view of its store: every call waits while the
// worker is frozen, so a paused worker's heartbeat cannot renew its lease.
type gatedStore struct {
	store.Store
	g *gate
}

func (s gatedStore) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	s.g.wait(ctx, p.Key)
	return s.Store.Acquire(ctx, p)
}

func (s gatedStore) Complete(ctx context.Context, p store.CompleteParams) error {
	s.g.wait(ctx, p.Key)
	return s.Store.Complete(ctx, p)
}

func (s gatedStore) Extend(ctx context.Context, p store.ExtendParams) error {
	s.g.wait(ctx, p.Key)
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Extend(ctx, p)
}

func (s gatedStore) Release(ctx context.Context, p store.LeaseRef) error {
	s.g.wait(ctx, p.Key)
	return s.Store.Release(ctx, p)
}

func (s gatedStore) MarkUnknown(ctx context.Context, p store.MarkUnknownParams) error {
	s.g.wait(ctx, p.Key)
	return s.Store.MarkUnknown(ctx, p)
}
