// Package storekit is the kit the tests of idem's packages share for
// stores: EachStore and its variants run a test on every store, Faulty
// fails the next N calls of an operation around a real store,
// DeadlineStore records the deadline its Complete calls are given, and
// Compare is the paired benchmark that measures a call against a baseline
// in the same run. Only tests import it.
package storekit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
)

// EachStore runs f on a new store of each kind in testenv.Stores. The
// memory store runs inside a synctest bubble, where the engine's
// heartbeat, deadlines and backoff (and the middleware's Wait) run on a
// fake clock that moves only when every goroutine of the test waits:
// waiting out a lease takes no real time, and no scheduler delay can make
// a lease end early. Redis runs in real time: there the server's clock is
// what is under test, and the test's margins must hold on a loaded
// machine.
func EachStore(t *testing.T, f func(t *testing.T, s store.Store)) {
	for name, newStore := range testenv.Stores() {
		t.Run(name, func(t *testing.T) {
			if name == "memory" {
				synctest.Test(t, func(t *testing.T) { f(t, newStore(t)) })
				return
			}
			f(t, newStore(t))
		})
	}
}

// EachStoreRealTime is EachStore with every store in real time, for tests
// that serve over a network: in a bubble, a goroutine waiting on a socket
// is not durably blocked, so the bubble's clock would never move.
func EachStoreRealTime(t *testing.T, f func(t *testing.T, s store.Store)) {
	EachKind(t, func(t *testing.T, newStore func(t *testing.T) store.Store) { f(t, newStore(t)) })
}

// EachKind runs f once for each kind of store, in real time, with the
// kind's constructor, for tests that make a store per subtest.
func EachKind(t *testing.T, f func(t *testing.T, newStore func(t *testing.T) store.Store)) {
	for name, newStore := range testenv.Stores() {
		t.Run(name, func(t *testing.T) { f(t, newStore) })
	}
}

// Op names a store operation, for Faulty.
type Op string

// The operations of store.Store.
const (
	OpAcquire     Op = "acquire"
	OpComplete    Op = "complete"
	OpExtend      Op = "extend"
	OpRelease     Op = "release"
	OpMarkUnknown Op = "mark unknown"
	OpClaim       Op = "claim"
	OpResolve     Op = "resolve"
	OpList        Op = "list unknown"
	OpGet         Op = "get"
	OpDelete      Op = "delete"
)

// ErrInjected is the error of a call that Faulty fails: a network error,
// as an unreachable store's.
var ErrInjected = errors.New("storekit: injected: connection refused")

// Faulty is a real store whose calls fail on demand, with ErrInjected:
// FailNext fails calls before they reach the store (it is unreachable),
// LoseNext after they took effect (the reply was lost on the way back).
// With only Store set it fails nothing. It is safe for concurrent use.
type Faulty struct {
	store.Store

	mu   sync.Mutex
	fail map[Op]int // guarded by mu: how many calls of each op to fail
	lose map[Op]int // guarded by mu: how many replies of each op to lose
}

// FailNext makes the next n calls of op fail without reaching the store.
// FailNext(op, math.MaxInt) takes the store down for op until
// FailNext(op, 0) brings it back.
func (f *Faulty) FailNext(op Op, n int) { f.set(&f.fail, op, n) }

// LoseNext makes the next n calls of op that succeed on the store report
// ErrInjected: their effect stands, their reply is lost.
func (f *Faulty) LoseNext(op Op, n int) { f.set(&f.lose, op, n) }

// FailsLeft returns how many calls of op FailNext still has to fail.
func (f *Faulty) FailsLeft(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fail[op]
}

func (f *Faulty) set(m *map[Op]int, op Op, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *m == nil {
		*m = map[Op]int{}
	}
	(*m)[op] = n
}

// take reports whether a call of op is to be failed, counting it.
func (f *Faulty) take(m map[Op]int, op Op) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m[op] <= 0 {
		return false
	}
	m[op]--
	return true
}

// call runs next(ctx, p) as the operation op: not at all when a failure
// of op is due (ErrInjected), and with its answer lost (ErrInjected after
// it took effect) when a lost answer is due.
func call[P, R any](f *Faulty, op Op, next func(context.Context, P) (R, error), ctx context.Context, p P) (R, error) {
	if f.take(f.fail, op) {
		var zero R
		return zero, ErrInjected
	}
	r, err := next(ctx, p)
	if err == nil && f.take(f.lose, op) {
		return r, ErrInjected
	}
	return r, err
}

// callErr is call for an operation that returns only an error.
func callErr[P any](f *Faulty, op Op, next func(context.Context, P) error, ctx context.Context, p P) error {
	_, err := call(f, op, func(ctx context.Context, p P) (struct{}, error) { return struct{}{}, next(ctx, p) }, ctx, p)
	return err
}

// Acquire implements store.Store.
func (f *Faulty) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	return call(f, OpAcquire, f.Store.Acquire, ctx, p)
}

// Complete implements store.Store.
func (f *Faulty) Complete(ctx context.Context, p store.CompleteParams) error {
	return callErr(f, OpComplete, f.Store.Complete, ctx, p)
}

// Extend implements store.Store.
func (f *Faulty) Extend(ctx context.Context, p store.ExtendParams) error {
	return callErr(f, OpExtend, f.Store.Extend, ctx, p)
}

// Release implements store.Store.
func (f *Faulty) Release(ctx context.Context, p store.LeaseRef) error {
	return callErr(f, OpRelease, f.Store.Release, ctx, p)
}

// MarkUnknown implements store.Store.
func (f *Faulty) MarkUnknown(ctx context.Context, p store.MarkUnknownParams) error {
	return callErr(f, OpMarkUnknown, f.Store.MarkUnknown, ctx, p)
}

// Claim implements store.Store.
func (f *Faulty) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	return call(f, OpClaim, f.Store.Claim, ctx, p)
}

// Resolve implements store.Store.
func (f *Faulty) Resolve(ctx context.Context, p store.ResolveParams) error {
	return callErr(f, OpResolve, f.Store.Resolve, ctx, p)
}

// ListUnknown implements store.Store.
func (f *Faulty) ListUnknown(ctx context.Context, p store.ListParams) (store.ListPage, error) {
	return call(f, OpList, f.Store.ListUnknown, ctx, p)
}

// Get implements store.Store.
func (f *Faulty) Get(ctx context.Context, id store.ID) (store.Record, error) {
	return call(f, OpGet, f.Store.Get, ctx, id)
}

// Delete implements store.Store.
func (f *Faulty) Delete(ctx context.Context, p store.DeleteParams) (bool, error) {
	return call(f, OpDelete, f.Store.Delete, ctx, p)
}

var _ store.Store = (*Faulty)(nil)

// DeadlineStore is a real store that sends on CompleteDeadline the
// deadline of the context each Complete is called with (the zero time for
// none), before it runs the Complete.
type DeadlineStore struct {
	store.Store
	CompleteDeadline chan time.Time
}

// NewDeadlineStore returns a DeadlineStore around s whose channel holds
// one deadline.
func NewDeadlineStore(s store.Store) *DeadlineStore {
	return &DeadlineStore{Store: s, CompleteDeadline: make(chan time.Time, 1)}
}

// Complete implements store.Store.
func (d *DeadlineStore) Complete(ctx context.Context, p store.CompleteParams) error {
	dl, _ := ctx.Deadline()
	d.CompleteDeadline <- dl
	return d.Store.Complete(ctx, p)
}
