package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/store"
)

// DefaultStoreTimeout is Options.StoreTimeout when it is zero: far above
// a store call's usual latency (well under a millisecond on loopback, a
// few on a network), and short enough that a client waiting on a store
// that stopped answering gets its 503 while it still waits.
const DefaultStoreTimeout = 2 * time.Second

// callContext is context.WithDeadline(parent, deadline) for store calls,
// whose timer is made only when the store asks for Done. A store that
// only reads the deadline or Err (the memory store) then costs the call
// no timer; one that selects on Done (pgx, rueidis, the coalescer, and
// go-redis v9.23, whose pool polls Done before it takes a connection)
// gets a context.WithDeadline child, which Value reveals, so that
// context.AfterFunc on this context needs no goroutine. The child costs
// about 1.1 µs and 6 allocations per call (a Done poll against none,
// measured in issue 35): a poll cannot be told from a wait, so the timer
// that bounds a wait is made for both.
type callContext struct {
	context.Context // the caller's

	deadline time.Time
	mu       sync.Mutex                   // serialises the first Done
	child    atomic.Pointer[childContext] // made by the first Done
}

type childContext struct {
	context.Context
	cancel context.CancelFunc
}

// callCtx starts the deadline of store calls made on ctx: the store
// timeout from now, or ctx's own deadline when that comes first. Call end
// once the calls are over.
func (e *Engine) callCtx(ctx context.Context) *callContext {
	return &callContext{Context: ctx, deadline: time.Now().Add(e.storeTimeout)}
}

func (c *callContext) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *callContext) Done() <-chan struct{} {
	if ch := c.child.Load(); ch != nil {
		return ch.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.child.Load()
	if ch == nil {
		ctx, cancel := context.WithDeadline(c.Context, c.deadline)
		ch = &childContext{ctx, cancel}
		c.child.Store(ch)
	}
	return ch.Done()
}

func (c *callContext) Err() error {
	if ch := c.child.Load(); ch != nil {
		return ch.Err()
	}
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *callContext) Value(key any) any {
	if ch := c.child.Load(); ch != nil {
		return ch.Value(key) // the child's own cancelCtx for the context package, the parent's values otherwise
	}
	return c.Context.Value(key)
}

// timedOut reports whether the calls ran out of time (not the caller's
// context: its own end).
func (c *callContext) timedOut() bool {
	return c.Context.Err() == nil && c.Err() != nil
}

// end stops the timer, if Done made one.
func (c *callContext) end() {
	if ch := c.child.Load(); ch != nil {
		ch.cancel()
	}
}

// Get returns the record of a key, for inspection; ErrNotFound when absent.
// It is the store's view: a result this engine holds (Options.MaxHeld)
// shows once it is stored.
func (e *Engine) Get(ctx context.Context, id ID) (Record, error) {
	if err := validate(id); err != nil {
		return Record{}, err
	}
	cctx := e.callCtx(ctx)
	defer cctx.end()
	start := time.Now()
	rec, err := e.store.Get(cctx, id)
	e.observe(ctx, "get", start, err)
	if err != nil && !errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("%w: get: %w", ErrStore, e.explain(cctx, err))
	}
	return rec, err
}

// explain says so when err came from the store timeout.
func (e *Engine) explain(cctx *callContext, err error) error {
	if err != nil && cctx.timedOut() {
		return &timeoutError{limit: e.storeTimeout, err: err}
	}
	return err
}

func (e *Engine) acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	start := time.Now()
	res, err := e.store.Acquire(ctx, p)
	e.observe(ctx, "acquire", start, err)
	return res, err
}

// finalizeOnce tries f once, within the store timeout.
func (e *Engine) finalizeOnce(ctx context.Context, f *finalization) error {
	cctx := e.callCtx(ctx)
	defer cctx.end()
	start := time.Now()
	err := f.outcome(f.call(cctx, e.store))
	e.observe(ctx, f.op, start, err)
	return e.explain(cctx, err)
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
