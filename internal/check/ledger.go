package check

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// The answers of a ledger call that did not apply an effect, or whose
// caller did not learn that it did.
var (
	// errLedgerStale: a call with a higher fence (or a lookup that
	// promised its fence would not run) came first; nothing was applied.
	errLedgerStale = errors.New("check: ledger: stale fence, not applied")
	// errLedgerRefused: the ledger refused the call before applying it.
	errLedgerRefused = errors.New("check: ledger: refused, not applied")
	// errLedgerReplyLost: the effect was applied and the answer lost, as
	// when a connection is cut after the request was written.
	errLedgerReplyLost = errors.New("check: ledger: applied, reply lost")
)

// Effect is one side effect the ledger applied.
type Effect struct {
	Key   string
	Fence int64
	Value string
	At    int64 // the recorder's clock
	// Began is when the client's request that ran it was sent: before
	// its attempt acquired the key. A delete after that may have ended
	// the attempt's lease, and lets the work run again.
	Began int64
}

// Ledger is the world outside idem where the work has its effect: a
// payment provider, fenced by key. It applies an effect only with a fence
// higher than every fence it saw for the key, so an owner that was taken
// over cannot write after its successor; a lookup of (key, fence) that
// finds nothing promises that fence will not run later (as a provider's
// lookup by idempotency key does).
type Ledger struct {
	rec *Recorder

	mu      sync.Mutex
	maxSeen map[string]int64    // guarded by mu
	byKey   map[string][]Effect // guarded by mu
	all     []Effect            // guarded by mu
}

// NewLedger returns an empty ledger that timestamps with rec.
func NewLedger(rec *Recorder) *Ledger {
	return &Ledger{rec: rec, maxSeen: map[string]int64{}, byKey: map[string][]Effect{}}
}

// fault is what the ledger does to one call, chosen by the caller's
// random source: nothing, refuse it, or apply it and lose the answer.
type fault uint8

const (
	noFault fault = iota
	refuse
	loseReply
)

// Apply runs the effect of key under fence and returns its value. With
// dedup (the provider deduplicates by key: what TakeoverRun needs) an
// effect already applied for the key is returned instead of a new one.
func (l *Ledger) Apply(key string, fence int64, dedup bool, f fault, began int64) (string, error) {
	if f == refuse {
		return "", errLedgerRefused
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if effs := l.byKey[key]; dedup && len(effs) > 0 {
		return effs[len(effs)-1].Value, nil
	}
	if fence <= l.maxSeen[key] {
		return "", errLedgerStale
	}
	l.maxSeen[key] = fence
	e := Effect{Key: key, Fence: fence, Value: fmt.Sprintf("charge:%s:f%d:%d", key, fence, len(l.all)), At: l.rec.Now(), Began: began}
	l.byKey[key] = append(l.byKey[key], e)
	l.all = append(l.all, e)
	if f == loseReply {
		return "", errLedgerReplyLost
	}
	return e.Value, nil
}

// Lookup is a provider's lookup by key: the value of the latest effect of
// key with a fence up to fence (an UNKNOWN record's attempt, or one it
// took over), or, when there is none, a promise that no call with such a
// fence will be applied later.
func (l *Ledger) Lookup(key string, fence int64) (string, bool) {
	e, ok := l.LookupEffect(key, fence)
	return e.Value, ok
}

// LookupEffect is Lookup that returns the effect found, with its fence
// (what a reconcile lookup echoes).
func (l *Ledger) LookupEffect(key string, fence int64) (Effect, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	effs := l.byKey[key]
	for i := len(effs) - 1; i >= 0; i-- {
		if effs[i].Fence <= fence {
			return effs[i], true
		}
	}
	l.maxSeen[key] = max(l.maxSeen[key], fence)
	return Effect{}, false
}

// Effects returns every effect applied, in order.
func (l *Ledger) Effects() []Effect {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}
