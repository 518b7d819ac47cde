// Package await is the wait of a request that found its key in flight
// (idemhttp's Options.Wait, idemgrpc's Options.Wait): it polls the store
// with a growing interval and is woken at once when a request of this
// process finishes the key, then ends with a replay, a lease of its own
// (the other request released the key), a mismatch, an UNKNOWN record, or
// still in flight when the time is up or the caller has gone.
package await

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// Waiters are the requests of one process waiting for keys. The zero
// value is ready; a nil *Waiters wakes no one and Turn still polls.
type Waiters struct {
	mu sync.Mutex
	m  map[store.ID]*waiting // a key is here only while someone waits on it
}

// waiting is one key's waiters; ch is closed, and replaced, each time a
// request of this process finishes the key.
type waiting struct {
	ch chan struct{}
	n  int
}

// Polling bounds: the first poll comes soon (a short call finishes
// soon), later ones back off so that a long wait does not load the store.
const (
	firstPoll = 5 * time.Millisecond
	maxPoll   = 100 * time.Millisecond
)

// Turn waits up to wait for att's key, in flight, to leave that state and
// returns the attempt that ended the wait. ctx is the one Begin runs
// under; gone is closed when the caller has left (its request's
// cancellation), which ends the wait with the attempt in flight.
func (w *Waiters) Turn(ctx context.Context, gone <-chan struct{}, e *idem.Engine, req idem.Request, att idem.Attempt, wait time.Duration) (_ idem.Attempt, err error) {
	deadline := time.Now().Add(wait)
	poll := firstPoll
	timer := time.NewTimer(0)
	defer timer.Stop()
	id := req.ID()
	k := w.watch(id)
	defer w.unwatch(id, k)
	for att.Outcome == idem.InFlight {
		left := time.Until(deadline)
		if left <= 0 {
			return att, nil
		}
		timer.Reset(min(poll, left))
		select {
		case <-gone:
			return att, nil
		case <-w.wakeup(k):
		case <-timer.C:
		}
		poll = min(2*poll, maxPoll)
		if att, err = e.Begin(ctx, req); err != nil {
			return att, err
		}
	}
	return att, nil
}

// Wake tells this process's waiters for id that the key finished.
func (w *Waiters) Wake(id store.ID) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if k, ok := w.m[id]; ok {
		close(k.ch)
		k.ch = make(chan struct{})
	}
}

// Len is how many keys someone waits on.
func (w *Waiters) Len() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

func (w *Waiters) watch(id store.ID) *waiting {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	k, ok := w.m[id]
	if !ok {
		if w.m == nil {
			w.m = make(map[store.ID]*waiting)
		}
		k = &waiting{ch: make(chan struct{})}
		w.m[id] = k
	}
	k.n++
	return k
}

func (w *Waiters) unwatch(id store.ID, k *waiting) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if k.n--; k.n == 0 {
		delete(w.m, id)
	}
}

// wakeup is the channel closed at the next Wake of k's key; nil (never
// ready) without Waiters.
func (w *Waiters) wakeup(k *waiting) <-chan struct{} {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return k.ch
}
