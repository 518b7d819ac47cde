package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// HoldObserver is an Observer that is also told about the finalizations
// the engine holds (Options.MaxHeld): a Complete, MarkUnknown or Release
// the store did not take in time, kept in memory and retried. op is
// "complete", "mark_unknown", "release" or "release_orphan" (the release
// of a key an acquire may have taken although Begin failed).
type HoldObserver interface {
	Held(id ID, op string, ev HoldEvent)
}

// HoldEvent is what happened to a held finalization.
type HoldEvent uint8

const (
	// HoldStarted: the store did not take it in time; the engine holds it
	// and retries it in the background.
	HoldStarted HoldEvent = iota + 1
	// HoldStored: a retry stored it (or found it done).
	HoldStored
	// HoldDropped: given up: the key is no longer the lease's (taken over,
	// resolved or deleted meanwhile: the store changed nothing), or, for a
	// release, the store did not take it before its time ran out. A held
	// Complete or MarkUnknown is never given up for time.
	HoldDropped
	// HoldRefused: the hold was full (or off); the finalize failed as a
	// store error.
	HoldRefused
)

// String names the event.
func (ev HoldEvent) String() string {
	switch ev {
	case HoldStarted:
		return "held"
	case HoldStored:
		return "stored"
	case HoldDropped:
		return "dropped"
	case HoldRefused:
		return "refused"
	}
	return fmt.Sprintf("HoldEvent(%d)", uint8(ev))
}

// Defaults of Options.MaxHeld and MaxHeldBytes.
const (
	DefaultMaxHeld      = 10000
	DefaultMaxHeldBytes = 64 << 20
)

// The background retries of held finalizations back off from firstRetry
// to maxRetryWait while the store keeps failing; retryConcurrency of them
// run at once once a first one went through, and a pass stops early when
// that many fail in a row.
const (
	firstRetry       = 50 * time.Millisecond
	maxRetryWait     = time.Second
	retryConcurrency = 8
)

// hold keeps the finalizations the store did not take in time, and
// retries them from one goroutine that runs while anything is held.
type hold struct {
	e        *Engine
	maxCount int // negative: nothing is held
	maxBytes int64
	n        atomic.Int64  // len(ops), read by Begin without the lock
	kick     chan struct{} // wakes the retrier before its backoff ends (Flush); buffered

	mu         sync.Mutex
	ops        map[string]*finalization // by owner token (one per attempt); guarded by mu
	answers    map[ID]*finalization     // the held Completes and MarkUnknowns by key, for Begin; guarded by mu
	bytes      int64                    // guarded by mu
	running    bool                     // the retrier runs; guarded by mu
	refusedLog rateLog                  // the "not held" line, at most once a second
	// empty is closed once nothing is held and what was removed has been
	// logged and observed (emptied); guarded by mu.
	empty   chan struct{}
	emptied bool
}

func newHold(e *Engine, maxCount int, maxBytes int64) *hold {
	empty := make(chan struct{})
	close(empty)
	return &hold{e: e, maxCount: maxCount, maxBytes: maxBytes, kick: make(chan struct{}, 1),
		ops: map[string]*finalization{}, answers: map[ID]*finalization{}, empty: empty, emptied: true}
}

// add holds f, which failed with cause. A Complete or MarkUnknown is
// retried until the store takes it or answers that the lease is lost
// (another settled the key): a result the process holds is kept until it
// is stored, and the store takes its owner's word however late, since an
// unsettled record never ends by time; the hold's bounds, not time, bound
// what it keeps. A release is retried until the lease's end (leaseEnd)
// and at least FinalizeTimeout: dropping one leaves the key UNKNOWN, the
// safe side. It reports false, having logged why, when the hold is full
// or off.
func (h *hold) add(f *finalization, leaseEnd time.Time, cause error) bool {
	if f.op == opComplete {
		f.result = cloneResult(f.result)
	}
	f.heldAt, f.size = time.Now(), f.cost()
	if f.op == opRelease || f.op == opReleaseOrphan {
		f.until = f.heldAt.Add(FinalizeTimeout)
		if leaseEnd.After(f.until) {
			f.until = leaseEnd
		}
	}
	h.mu.Lock()
	full := h.maxCount < 0 || len(h.ops) >= h.maxCount || h.bytes+f.size > h.maxBytes
	if !full {
		h.ops[f.ref.Owner] = f
		if f.op == opComplete || f.op == opMarkUnknown {
			if a := h.answers[f.ref.ID]; a == nil || a.ref.Fence < f.ref.Fence {
				h.answers[f.ref.ID] = f
			}
		}
		h.bytes += f.size
		h.n.Store(int64(len(h.ops)))
		if h.emptied {
			h.empty, h.emptied = make(chan struct{}), false
		}
		if !h.running {
			h.running = true
			go h.retry()
		}
	}
	count, bytes := len(h.ops), h.bytes
	h.mu.Unlock()
	log := h.e.log.With("tenant", f.ref.Tenant, "key", f.ref.Key, "fence", f.ref.Fence, "err", cause)
	if full {
		if ok, skipped := h.refusedLog.allow(); ok {
			log.Error("idem: "+f.op+" failed and is not held (the hold is full or off); the key stays PROCESSING until its lease ends",
				"held", count, "held_bytes", bytes, "refused_unlogged", skipped)
		}
		h.event(f, HoldRefused)
		return false
	}
	level := slog.LevelWarn
	if f.op == opReleaseOrphan { // one per 503 in an outage, which idemhttp logs already
		level = slog.LevelDebug
	}
	var until any = "stored or the lease lost"
	if !f.until.IsZero() {
		until = f.until
	}
	log.Log(context.Background(), level, "idem: "+f.op+" not stored; holding it in memory and retrying it in the background", "until", until)
	h.event(f, HoldStarted)
	return true
}

// answer is the outcome of a Begin for id from a held Complete or
// MarkUnknown, and that attempt's fence: this process knows the key's
// outcome before its store does.
func (h *hold) answer(id ID, fingerprint string) (Attempt, int64, bool) {
	h.mu.Lock()
	f := h.answers[id]
	h.mu.Unlock()
	if f == nil {
		return Attempt{}, 0, false
	}
	// An UNKNOWN record is kept until settled: TTL 0, as a store reports it.
	rec := Record{ID: id, State: StateUnknown, Owner: f.ref.Owner, Fence: f.ref.Fence, Fingerprint: f.fingerprint,
		CompletedAt: f.heldAt, Reason: f.reason}
	if f.op == opComplete {
		rec.State, rec.Result, rec.TTL = StateCompleted, &f.result, max(f.retention, f.keyRetention)
	}
	return h.e.decide(rec, fingerprint), f.ref.Fence, true
}

// supersede stops answering for id from the held attempt with this fence:
// the store holds a newer attempt of the key. The finalization stays held
// until its retry finds the lease gone.
func (h *hold) supersede(id ID, fence int64) {
	h.mu.Lock()
	if f := h.answers[id]; f != nil && f.ref.Fence == fence {
		delete(h.answers, id)
	}
	h.mu.Unlock()
	h.wake()
}

// holds reports whether a finalization of the attempt with this owner
// token is held; it wakes the retrier if so, to try it at once.
func (h *hold) holds(owner string) bool {
	h.mu.Lock()
	f, ok := h.ops[owner]
	if ok {
		f.next = time.Time{}
	}
	h.mu.Unlock()
	if ok {
		h.wake()
	}
	return ok
}

func (h *hold) wake() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// retry runs while anything is held: it tries the held finalizations,
// backing off while the store fails, and ends when none is left.
func (h *hold) retry() {
	wait := firstRetry
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-h.kick:
		}
		if h.pass() {
			wait = firstRetry
		} else {
			wait = min(2*wait, maxRetryWait)
		}
		h.mu.Lock()
		if len(h.ops) == 0 {
			h.running = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		t.Reset(wait)
	}
}

// pass drops the releases that ran out of time and tries the rest that is due, in
// drain order (drainsBefore): what carries knowledge first, so that a
// store that is back takes the results a process holds before anything
// else, and a crash soon after loses as few as can be. One is tried
// first, as a probe, and, if the store took it, the others a few at a
// time, until retryConcurrency fail in a row (a store just back may
// refuse some calls; one that is down again refuses them all). It
// reports false when the store still fails.
func (h *hold) pass() bool {
	now := time.Now()
	var due, expired []*finalization
	h.mu.Lock()
	for _, f := range h.ops {
		switch {
		case !f.until.IsZero() && now.After(f.until):
			h.removeLocked(f)
			expired = append(expired, f)
		case !now.Before(f.next):
			due = append(due, f)
		}
	}
	h.mu.Unlock()
	for _, f := range expired {
		h.dropped(f, errors.New("the store did not take the release in time"))
	}
	h.settled()
	if len(due) == 0 {
		return true
	}
	slices.SortFunc(due, drainsBefore)
	if !h.try(due[0]) {
		return false
	}
	var failing atomic.Int32 // tries failed in a row
	var wg sync.WaitGroup
	sem := make(chan struct{}, retryConcurrency)
	for _, f := range due[1:] {
		sem <- struct{}{}
		if failing.Load() >= retryConcurrency {
			<-sem
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if h.try(f) {
				failing.Store(0)
			} else {
				failing.Add(1)
			}
		})
	}
	wg.Wait()
	return failing.Load() < retryConcurrency
}

// try tries f once and settles it if the store answered; it reports
// whether the store answered.
func (h *hold) try(f *finalization) bool {
	err := h.e.finalizeOnce(context.Background(), f)
	if errors.Is(err, errNotLanded) {
		if time.Since(f.heldAt) < landingWindow {
			// The store answers; the acquire may land yet: look again in
			// a while (sooner if a retry of the key meets its record).
			h.mu.Lock()
			f.next = time.Now().Add(maxRetryWait)
			h.mu.Unlock()
			return true
		}
		err = nil // it never did
	}
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		return false
	}
	if !h.remove(f) {
		return true
	}
	defer h.settled()
	if err != nil {
		h.dropped(f, err)
		return true
	}
	h.e.log.Info("idem: held "+f.op+" stored", "tenant", f.ref.Tenant, "key", f.ref.Key, "fence", f.ref.Fence,
		"held_for", time.Since(f.heldAt).Round(time.Millisecond))
	h.event(f, HoldStored)
	return true
}

// remove takes f out of the hold; false if it was not held any more.
func (h *hold) remove(f *finalization) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ops[f.ref.Owner] != f {
		return false
	}
	h.removeLocked(f)
	return true
}

func (h *hold) removeLocked(f *finalization) {
	delete(h.ops, f.ref.Owner)
	if h.answers[f.ref.ID] == f {
		delete(h.answers, f.ref.ID)
	}
	h.bytes -= f.size
	h.n.Store(int64(len(h.ops)))
}

// settled closes empty, once what was removed has been logged and
// observed, if nothing is held any more.
func (h *hold) settled() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ops) == 0 && !h.emptied {
		close(h.empty)
		h.emptied = true
	}
}

// forget drops whatever is held for id: an operator deleted the key.
func (h *hold) forget(id ID) {
	if h.n.Load() == 0 {
		return
	}
	var gone []*finalization
	h.mu.Lock()
	for _, f := range h.ops {
		if f.ref.ID == id {
			h.removeLocked(f)
			gone = append(gone, f)
		}
	}
	h.mu.Unlock()
	for _, f := range gone {
		h.dropped(f, ErrLeaseLost)
	}
	h.settled()
}

func (h *hold) dropped(f *finalization, why error) {
	log := h.e.log.With("tenant", f.ref.Tenant, "key", f.ref.Key, "fence", f.ref.Fence, "err", why)
	switch {
	case errors.Is(why, ErrLeaseLost):
		log.Warn("idem: held " + f.op + " dropped: the key is no longer this lease's (taken over, resolved or deleted) and the store changed nothing")
	case f.op == opReleaseOrphan:
		log.Warn("idem: gave up releasing a key that an unanswered acquire may have taken; if it did, the key turns UNKNOWN when a retry meets its ended lease")
	default:
		log.Error("idem: held "+f.op+" dropped: the store did not take it in time; the key stays UNKNOWN (its lease ended) until resolved",
			"held_for", time.Since(f.heldAt).Round(time.Millisecond))
	}
	h.event(f, HoldDropped)
}

func (h *hold) event(f *finalization, ev HoldEvent) {
	if o, ok := h.e.obs.(HoldObserver); ok {
		o.Held(f.ref.ID, f.op, ev)
	}
}

// flushHeld tries at once to store every finalization the engine holds
// and waits until none is held, or until ctx ends; then it returns an
// error that says how many are still held (their retries go on).
func (e *Engine) flushHeld(ctx context.Context) error {
	h := e.held
	h.mu.Lock()
	empty := h.empty
	h.mu.Unlock()
	h.wake()
	select {
	case <-empty:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("idem: Shutdown: %d finalizations still held: %w", h.n.Load(), ctx.Err())
	}
}

// rateLog lets a log line through at most once a second, and counts the
// ones it held back.
type rateLog struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

func (r *rateLog) allow() (ok bool, skipped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); r.last.IsZero() || now.Sub(r.last) >= time.Second {
		r.last, skipped, r.skipped = now, r.skipped, 0
		return true, skipped
	}
	r.skipped++
	return false, 0
}
