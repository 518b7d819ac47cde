package lab

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"
)

// errDeclined is the provider's retryable failure: nothing was charged.
var errDeclined = errors.New("lab: provider failed the call, nothing charged")

// call is one call the fake payment provider received.
type call struct {
	Key      string
	Fence    int64
	Worker   int
	At       time.Time
	Charge   string // empty when the call failed
	Executed bool   // a new charge was made (false: failed, or deduplicated by key)
}

// callPlan tells the provider how to behave on the n-th call (from 0) for a key.
type callPlan func(n int) (delay time.Duration, fail bool)

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
	seq     int
}

func newProvider(dedup bool, plan callPlan) *provider {
	return &provider{dedup: dedup, plan: plan, perKey: map[string]int{}, charged: map[string]string{}}
}

// Charge charges once for key, unless the plan fails the call.
func (p *provider) Charge(ctx context.Context, worker int, key string, fence int64) (string, error) {
	p.mu.Lock()
	n := p.perKey[key]
	p.perKey[key] = n + 1
	p.mu.Unlock()
	var delay time.Duration
	fail := false
	if p.plan != nil {
		delay, fail = p.plan(n)
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := call{Key: key, Fence: fence, Worker: worker, At: time.Now()}
	if fail {
		p.calls = append(p.calls, c)
		return "", errDeclined
	}
	if prev, ok := p.charged[key]; ok && p.dedup {
		c.Charge = prev
		p.calls = append(p.calls, c)
		return prev, nil
	}
	p.seq++
	c.Charge = "ch_" + strconv.Itoa(p.seq)
	c.Executed = true
	p.charged[key] = c.Charge
	p.calls = append(p.calls, c)
	return c.Charge, nil
}

// Calls returns a copy of every call so far.
func (p *provider) Calls() []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]call(nil), p.calls...)
}
