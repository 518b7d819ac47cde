// Package finalctx holds the context that bounds the Complete, Release or
// MarkUnknown after a handler, shared by idemhttp and idemgrpc.
package finalctx

import (
	"context"
	"sync"
	"time"
)

// Context is context.WithTimeout(detached, idem.FinalizeTimeout)
// for a parent that is never done, with its timer started only when
// someone waits on Done. A store that only asks Err (the memory store)
// then costs the finalize no timer and no allocation; stores that select
// on Done get the same deadline as before.
type Context struct {
	context.Context // the detached parent: no deadline, never done

	deadline time.Time
	mu       sync.Mutex
	done     chan struct{} // made by the first Done
	timer    *time.Timer   // started by the first Done
	err      error
}

func (c *Context) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *Context) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		c.checkDeadline()
		if c.err != nil {
			close(c.done)
		} else {
			c.timer = time.AfterFunc(time.Until(c.deadline), func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.end(context.DeadlineExceeded)
			})
		}
	}
	return c.done
}

func (c *Context) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkDeadline()
	return c.err
}

// checkDeadline ends the context when its deadline has passed, so that Err
// does not wait for the timer (which may not even run).
func (c *Context) checkDeadline() {
	if c.err == nil && !time.Now().Before(c.deadline) {
		c.end(context.DeadlineExceeded)
	}
}

// end records why the context is done, once, and closes Done if it was made.
func (c *Context) end(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	if c.timer != nil {
		c.timer.Stop()
	}
}

// Start makes c a context of parent that ends timeout from now. A
// Context lives inside a larger struct (one allocation per request), so it
// is started rather than made.
func (c *Context) Start(parent context.Context, timeout time.Duration) {
	c.Context, c.deadline = parent, time.Now().Add(timeout)
}

// Cancel ends the context once the finalize is over, and its timer with it.
func (c *Context) Cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.end(context.Canceled)
}
