package lab

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"
)

// Errors of the payment provider. errDeclined and errRefused say that
// nothing was charged: the worker may release the key.
var (
	errDeclined = errors.New("lab: provider failed the call, nothing charged")
	// errRefused: the call carried a fence that a lookup already answered
	// "never executed" for; the provider keeps that promise and refuses it.
	errRefused = errors.New("lab: provider refused a call a lookup had declared never executed")
	// errNoCharge: a lookup found no charge for the key, none running, and
	// from now on refuses a late call with the fence asked about.
	errNoCharge = errors.New("lab: provider has no charge for this key")
	// errChargeRunning: a lookup found a call for the key still running.
	errChargeRunning = errors.New("lab: provider is still running a call for this key")
)

// call is one call the fake payment provider received.
type call struct {
	Key      string
	Fence    int64
	Worker   int
	At       time.Time
	Charge   string // empty when the call failed
	Executed bool   // a new charge was made (false: failed, refused, or deduplicated by key)
}

// callPlan tells the provider how to behave on the n-th call (from 0) for a key.
type callPlan func(n int) (delay time.Duration, fail bool)

// payments is the provider as a worker sees it: in process, or over HTTP
// (payClient), where a call can end without an answer.
type payments interface {
	// Charge charges once for key. An error wrapping errDeclined or
	// errRefused means nothing was charged; one wrapping
	// idem.ErrOutcomeUnknown means the call may have charged.
	Charge(ctx context.Context, worker int, key string, fence int64) (string, error)
	// Lookup asks for the charge made for key, as real providers answer
	// GET /charges?idempotency_key=: the charge, errNoCharge (never
	// executed, and a late call with a fence up to fence is refused from
	// now on), or errChargeRunning.
	Lookup(ctx context.Context, key string, fence int64) (string, error)
}

// provider is an in-process fake payment provider. Each executed call
// makes a new charge with a new id; with dedup on, a second call with the
// same key returns the first charge without executing (the provider-side
// idempotency key).
type provider struct {
	dedup bool
	plan  callPlan

	mu      sync.Mutex
	calls   []call
	perKey  map[string]int
	charged map[string]string
	running map[string]int   // calls of a key between arrival and answer
	barred  map[string]int64 // the highest fence a lookup declared never executed
	changed chan struct{}    // closed and replaced whenever a call ends
	seq     int
}

func newProvider(dedup bool, plan callPlan) *provider {
	return &provider{dedup: dedup, plan: plan, perKey: map[string]int{}, charged: map[string]string{},
		running: map[string]int{}, barred: map[string]int64{}, changed: make(chan struct{})}
}

// Charge charges once for key, unless the plan fails the call or a lookup
// barred its fence. A call whose ctx ends during the plan's delay still
// charges (the request reached the provider) and answers that its outcome
// is unknown to the caller, who has stopped waiting.
func (p *provider) Charge(ctx context.Context, worker int, key string, fence int64) (string, error) {
	ch, _, err := p.charge(ctx, worker, key, fence)
	if err == nil && ctx.Err() != nil {
		return "", unknownCall(ctx.Err())
	}
	return ch, err
}

// charge is Charge; it also says whether this was the key's first call.
func (p *provider) charge(ctx context.Context, worker int, key string, fence int64) (string, bool, error) {
	p.mu.Lock()
	n := p.perKey[key]
	p.perKey[key] = n + 1
	p.running[key]++
	p.mu.Unlock()
	var delay time.Duration
	fail := false
	if p.plan != nil {
		delay, fail = p.plan(n)
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.ended(key)
	c := call{Key: key, Fence: fence, Worker: worker, At: time.Now()}
	if fail {
		p.calls = append(p.calls, c)
		return "", n == 0, errDeclined
	}
	if b, ok := p.barred[key]; ok && fence <= b {
		p.calls = append(p.calls, c)
		return "", n == 0, errRefused
	}
	if prev, ok := p.charged[key]; ok && p.dedup {
		c.Charge = prev
		p.calls = append(p.calls, c)
		return prev, n == 0, nil
	}
	p.seq++
	c.Charge = "ch_" + strconv.Itoa(p.seq)
	c.Executed = true
	if _, ok := p.charged[key]; !ok {
		p.charged[key] = c.Charge // a lookup answers with the first charge
	}
	p.calls = append(p.calls, c)
	return c.Charge, n == 0, nil
}

// ended notes that a call of key has ended; p.mu is held.
func (p *provider) ended(key string) {
	p.running[key]--
	close(p.changed)
	p.changed = make(chan struct{})
}

// Lookup answers for key as payments.Lookup says. A call still running is
// waited for until ctx ends: the answer of a lookup that returns at once
// would mostly be "still running".
func (p *provider) Lookup(ctx context.Context, key string, fence int64) (string, error) {
	for {
		p.mu.Lock()
		if ch, ok := p.charged[key]; ok {
			p.mu.Unlock()
			return ch, nil
		}
		if p.running[key] == 0 {
			if fence > p.barred[key] {
				p.barred[key] = fence
			}
			p.mu.Unlock()
			return "", errNoCharge
		}
		changed := p.changed
		p.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return "", errChargeRunning
		}
	}
}

// Calls returns a copy of every call so far.
func (p *provider) Calls() []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]call(nil), p.calls...)
}
