package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/ctxtime"
	"github.com/idemkit/idem/store"
)

// The defaults of the bounds of ReconcileAll (Options).
const (
	// DefaultReconcileRate is how many Reconcile calls a sweep starts per
	// second at most.
	DefaultReconcileRate = 20
	// DefaultReconcileConcurrency is how many Reconcile calls a sweep has
	// in flight at most.
	DefaultReconcileConcurrency = 4
	// DefaultReconcileBackoff is how long a sweep leaves a key alone after
	// a Reconcile call about it failed or answered unknown, the first time.
	DefaultReconcileBackoff = 30 * time.Second
	// DefaultReconcileMaxBackoff caps the doubling of the backoff.
	DefaultReconcileMaxBackoff = 30 * time.Minute
)

// maxBackoffKeys bounds the keys whose backoff an engine remembers. A key
// it has no room for is asked every sweep, within the rate bound.
const maxBackoffKeys = 100_000

// ReconcileStats counts what one ReconcileAll sweep did.
type ReconcileStats struct {
	Unknown     int   // keys asked about that stayed UNKNOWN (the verdict was unknown, or Reconcile failed)
	Failed      int   // of Unknown, the keys whose Reconcile call failed
	Completed   int   // keys recorded as completed
	NotExecuted int   // keys released
	Skipped     int   // keys another process was reconciling, or that changed meanwhile
	BackedOff   int   // keys not asked about: a call about them failed or answered unknown a short while ago
	FirstError  error // the first failed Reconcile call's error, naming its key, for the caller's log line
}

// keyBackoff is what a sweep remembers of a key whose Reconcile call
// failed or answered unknown.
type keyBackoff struct {
	fence    int64     // the UNKNOWN record's: a new attempt starts afresh
	failures int       // in a row
	until    time.Time // not asked again before
	pass     uint64    // the last sweep that listed the key
}

// sweeper is the state that sweeps keep from one to the next.
type sweeper struct {
	rate        float64
	concurrency int
	backoff     time.Duration
	maxBackoff  time.Duration
	slot        chan struct{} // held by the sweep under way: one at a time

	mu     sync.Mutex // guards passes and keys
	passes uint64
	keys   map[ID]keyBackoff
}

func newSweeper(o Options) (*sweeper, error) {
	if !(o.ReconcileRate >= 0) || o.ReconcileConcurrency < 0 || o.ReconcileBackoff < 0 || o.ReconcileMaxBackoff < 0 { // NaN too
		return nil, errors.New("idem: New: negative ReconcileRate, ReconcileConcurrency, ReconcileBackoff or ReconcileMaxBackoff")
	}
	s := &sweeper{rate: o.ReconcileRate, concurrency: o.ReconcileConcurrency, backoff: o.ReconcileBackoff,
		maxBackoff: o.ReconcileMaxBackoff, slot: make(chan struct{}, 1), keys: map[ID]keyBackoff{}}
	if s.rate == 0 {
		s.rate = DefaultReconcileRate
	}
	if s.concurrency == 0 {
		s.concurrency = DefaultReconcileConcurrency
	}
	if s.backoff == 0 {
		s.backoff = DefaultReconcileBackoff
	}
	if s.maxBackoff == 0 {
		s.maxBackoff = max(DefaultReconcileMaxBackoff, s.backoff)
	}
	if s.maxBackoff < s.backoff {
		return nil, fmt.Errorf("idem: New: ReconcileMaxBackoff %v is below ReconcileBackoff %v", s.maxBackoff, s.backoff)
	}
	return s, nil
}

// ReconcileAll asks Options.Reconcile about every UNKNOWN key, of all
// tenants, and records each answer: run it from a background loop so that
// keys no retry comes back for are resolved too. It starts at most
// Options.ReconcileRate calls a second and has at most
// Options.ReconcileConcurrency in flight; a key whose call failed or
// answered unknown is left alone by the next sweeps for
// Options.ReconcileBackoff, doubled with each further such answer up to
// Options.ReconcileMaxBackoff (a retry of the key still asks at once). It
// logs nothing per key: the stats count the failures and keep the first
// error. One sweep runs at a time; a second call waits for the first. It
// stops at the first store error, or when ctx ends.
func (e *Engine) ReconcileAll(ctx context.Context) (ReconcileStats, error) {
	if e.reconcile == nil {
		return ReconcileStats{}, ErrNoReconcile
	}
	s := e.sweeper
	select {
	case s.slot <- struct{}{}:
		defer func() { <-s.slot }()
	case <-ctx.Done():
		return ReconcileStats{}, ctx.Err()
	}
	sw := &sweep{e: e, s: s, busy: make(chan struct{}, s.concurrency)}
	s.mu.Lock()
	s.passes++
	sw.pass = s.passes
	s.mu.Unlock()
	sw.ctx, sw.stop = context.WithCancelCause(ctx)
	defer sw.stop(nil)
	complete, err := sw.dispatch()
	if err != nil {
		sw.stop(err)
	}
	sw.wg.Wait()
	if complete {
		s.forget(sw.pass)
	}
	return sw.st, context.Cause(sw.ctx)
}

// sweep is one run of ReconcileAll.
type sweep struct {
	e    *Engine
	s    *sweeper
	pass uint64
	ctx  context.Context
	stop context.CancelCauseFunc // with the first store error
	busy chan struct{}           // one token per call in flight
	wg   sync.WaitGroup          // the calls in flight

	mu sync.Mutex // guards st
	st ReconcileStats
}

// dispatch lists every UNKNOWN key and asks about each one not backed
// off, once a call is free and the rate allows. It reports whether it
// listed them all, and the store's error.
func (sw *sweep) dispatch() (bool, error) {
	interval := time.Duration(float64(time.Second) / sw.s.rate)
	var next time.Time // when the rate allows the next call
	p := ListParams{AllTenants: true, Limit: store.DefaultListLimit}
	for {
		page, err := sw.e.ListUnknown(sw.ctx, p)
		if err != nil {
			return false, err
		}
		for _, listed := range page.Records {
			if sw.s.backedOff(listed, sw.pass) {
				sw.mu.Lock()
				sw.st.BackedOff++
				sw.mu.Unlock()
				continue
			}
			select {
			case sw.busy <- struct{}{}:
			case <-sw.ctx.Done():
				return false, nil
			}
			if err := ctxtime.Sleep(sw.ctx, time.Until(next)); err != nil {
				<-sw.busy
				return false, nil
			}
			next = time.Now().Add(interval)
			sw.wg.Go(func() { sw.ask(listed) })
		}
		if page.Next == "" {
			return true, nil
		}
		p.After = page.Next
	}
}

// ask reconciles one listed key and counts what came of it.
func (sw *sweep) ask(listed Record) {
	defer func() { <-sw.busy }()
	r, err := sw.e.reconcileOnce(sw.ctx, listed.ID, sw.e.retention, sw.e.keyRetention)
	if err != nil {
		sw.stop(err)
		return
	}
	stayed := !r.absent && r.rec.State == StateUnknown && r.rec.Fence == listed.Fence
	sw.s.answered(listed, r.asked, stayed, sw.pass)
	sw.mu.Lock()
	defer sw.mu.Unlock()
	switch {
	case r.absent:
		sw.st.NotExecuted++
	case stayed && r.asked:
		sw.st.Unknown++
		if r.failed != nil {
			sw.st.Failed++
			if sw.st.FirstError == nil {
				sw.st.FirstError = fmt.Errorf("tenant %q key %q fence %d: %w", listed.Tenant, listed.Key, listed.Fence, r.failed)
			}
		}
	case r.rec.State == StateCompleted && r.rec.Fence == listed.Fence:
		sw.st.Completed++
	default:
		sw.st.Skipped++
	}
}

// backedOff reports whether listed is to be left alone in this pass, and
// notes that the pass listed it.
func (s *sweeper) backedOff(listed Record, pass uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.keys[listed.ID]
	switch {
	case !ok:
		return false
	case b.fence != listed.Fence: // another attempt's record
		delete(s.keys, listed.ID)
		return false
	}
	b.pass = pass
	s.keys[listed.ID] = b
	return time.Now().Before(b.until)
}

// answered records what came of listed: asked and still UNKNOWN (the
// call failed, or answered unknown) doubles its backoff; not asked (another
// process holds the claim) and still UNKNOWN keeps it; anything else ends
// it.
func (s *sweeper) answered(listed Record, asked, stayed bool, pass uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.keys[listed.ID]
	switch {
	case !stayed:
		delete(s.keys, listed.ID)
		return
	case !asked:
		return
	}
	if !ok || b.fence != listed.Fence {
		if !ok && len(s.keys) >= maxBackoffKeys {
			return
		}
		b = keyBackoff{fence: listed.Fence}
	}
	b.failures++
	wait := s.backoff
	for i := 1; i < b.failures && wait < s.maxBackoff; i++ {
		wait *= 2
	}
	b.until, b.pass = time.Now().Add(min(wait, s.maxBackoff)), pass
	s.keys[listed.ID] = b
}

// forget drops the backoff of the keys that the complete sweep pass did
// not list: they are no longer UNKNOWN.
func (s *sweeper) forget(pass uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, b := range s.keys {
		if b.pass != pass {
			delete(s.keys, id)
		}
	}
}
