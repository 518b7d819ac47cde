// Package handlerctx is the plumbing idemhttp and idemgrpc share around a
// protected handler: the disposition a handler may declare for its key
// (their SetDisposition), the mark idem's clients leave when the handler
// sends a downstream step (BeginStep), and the context the handler runs
// under, which carries the lease and both without an allocation of its own.
package handlerctx

import (
	"context"
	"strconv"
	"sync"

	"github.com/idemkit/idem/internal/valuectx"
)

// Disposition is what the middleware or interceptor does with a key once
// its handler has answered. idemhttp and idemgrpc export it under their
// own names (Disposition, DispositionStore, ...).
type Disposition uint8

const (
	Store   Disposition = iota + 1 // store the answer and replay it
	Release                        // delete the key: a retry runs the handler again
	Unknown                        // turn the key UNKNOWN: nothing runs it again until resolved
)

// String names the disposition.
func (d Disposition) String() string {
	switch d {
	case Store:
		return "store"
	case Release:
		return "release"
	case Unknown:
		return "unknown"
	}
	return "Disposition(" + strconv.Itoa(int(d)) + ")"
}

// Override is what a handler declared for one call, and what idem's
// clients saw it send; its disposition is zero when nothing was declared.
type Override struct {
	mu     sync.Mutex
	d      Disposition // guarded by mu
	reason string      // guarded by mu
	steps  int         // downstream steps begun (BeginStep); guarded by mu
	unsent int         // of those, the ones that provably never left (NotSent); guarded by mu
}

// Get returns what was declared.
func (o *Override) Get() (Disposition, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.d, o.reason
}

// Set records d and reason on the Override that ctx carries (the last
// call wins). It reports false, doing nothing, when ctx carries none (it
// is not a protected handler's) or d is not a disposition.
func Set(ctx context.Context, d Disposition, reason string) bool {
	o, ok := ctx.Value(overrideKey{}).(*Override)
	if !ok || d < Store || d > Unknown {
		return false
	}
	o.mu.Lock()
	o.d, o.reason = d, reason
	o.mu.Unlock()
	return true
}

type overrideKey struct{}

// BeginStep records, on the Override ctx carries, that a downstream
// request carrying a step key derived from the handler's scope
// (idemclient.DerivedKey) is about to be sent, and returns that Override
// for NotSent; nil, doing nothing, when ctx is not a protected handler's.
// Marking before the send keeps a step still under way (sent from a
// goroutine the handler did not wait for) on the safe side.
func BeginStep(ctx context.Context) *Override {
	o, ok := ctx.Value(overrideKey{}).(*Override)
	if !ok {
		return nil
	}
	o.mu.Lock()
	o.steps++
	o.mu.Unlock()
	return o
}

// NotSent records that a step begun with BeginStep provably never left
// (idemclient.Sent is false for its error). A nil Override does nothing.
func (o *Override) NotSent() {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.unsent++
	o.mu.Unlock()
}

// StepSent reports whether a downstream step of the handler may have
// reached its server: one was begun and not proved unsent. The handler's
// status then does not prove that nothing took effect: the step may have
// (a payment charged), and the status may be the downstream's, passed on.
func (o *Override) StepSent() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.steps > o.unsent
}

// Context is the context a protected handler runs under: the lease's
// (cancelled when the lease can no longer be held, and carrying the lease
// for idem.LeaseFromContext), carrying the call's Override for Set. It is
// context.WithValue without an allocation of its own: it lives in the
// call's state.
type Context = valuectx.Context[overrideKey, *Override]
