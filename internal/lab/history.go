package lab

import (
	"sync"
	"time"
)

// OpType is the kind of a history entry, as in Jepsen.
type OpType uint8

const (
	OpInvoke OpType = iota + 1 // a client sent a request
	OpOK                       // it succeeded with a result
	OpFail                     // it failed and took no effect (409, 503)
	OpInfo                     // its outcome is unknown: the client timed out
)

// String names the type.
func (t OpType) String() string {
	return [...]string{"?", "invoke", "ok", "fail", "info"}[min(int(t), 4)]
}

// Op is one entry of a run's history.
type Op struct {
	Type   OpType
	Client int
	Key    string
	Worker int
	Result string // OpOK: the charge id; OpFail, OpInfo: the error
	// Told is set on an OpInfo that a worker answered: it said the
	// outcome is unknown (the key is UNKNOWN) instead of running the work
	// again. Without it, an OpInfo is a client that timed out.
	Told bool
	At   time.Time
}

// history is the ordered record of every operation in a run.
type history struct {
	mu  sync.Mutex
	ops []Op
}

func (h *history) add(op Op) {
	op.At = time.Now()
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

func (h *history) all() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Counts is what the checker found in one run (or the sum of several).
type Counts struct {
	Requests      int // invocations
	Timeouts      int // info: the client timed out, the outcome is unknown to it
	Unknown       int // keys no client got a result for, and a worker answered that the outcome is unknown
	DoubleExec    int // keys the provider executed more than once
	DoubleEffects int // keys with more than one committed ledger row
	LostResults   int // keys whose acknowledged result was later replayed differently
	Stuck         int // keys no client got an answer for, not even that the outcome is unknown
	Fenced        int // stale owners refused (lease check, store finalize, ledger fence)
}

func (c *Counts) add(o Counts) {
	c.Requests += o.Requests
	c.Timeouts += o.Timeouts
	c.Unknown += o.Unknown
	c.DoubleExec += o.DoubleExec
	c.DoubleEffects += o.DoubleEffects
	c.LostResults += o.LostResults
	c.Stuck += o.Stuck
	c.Fenced += o.Fenced
}

// check reads a run's history, the provider's calls and the ledger rows.
func check(keys []string, ops []Op, calls []call, rows map[string]int, fenced int) Counts {
	var c Counts
	first := map[string]string{}
	lost := map[string]bool{}
	told := map[string]bool{}
	for _, op := range ops {
		switch op.Type {
		case OpInvoke:
			c.Requests++
		case OpInfo:
			if op.Told {
				told[op.Key] = true
			} else {
				c.Timeouts++
			}
		case OpOK:
			r, seen := first[op.Key]
			if !seen {
				first[op.Key] = op.Result
			} else if r != op.Result {
				lost[op.Key] = true
			}
		}
	}
	executed := map[string]int{}
	for _, cl := range calls {
		if cl.Executed {
			executed[cl.Key]++
		}
	}
	for _, k := range keys {
		if executed[k] > 1 {
			c.DoubleExec++
		}
		if rows[k] > 1 {
			c.DoubleEffects++
		}
		if lost[k] {
			c.LostResults++
		}
		if _, ok := first[k]; !ok {
			if told[k] {
				c.Unknown++
			} else {
				c.Stuck++
			}
		}
	}
	c.Fenced = fenced
	return c
}
