package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// batchLua runs the operations of a batch (see batch.lua and batchScript).
//
//go:embed batch.lua
var batchLua string

// batchOps are the scripts a batch carries, in the order of batch.lua's
// OPS: every single-key one (list.lua reads many keys).
var batchOps = []*script{acquireScript, completeScript, extendScript, releaseScript, markUnknownScript,
	claimScript, resolveScript, getScript, deleteScript}

// batchScript is batch.lua behind each of batchOps as a local function of
// (KEYS, ARGV): a batched operation runs its own script's code, only on
// its own slices of the batch's keys and arguments.
//
// The batch reads the server's clock once, before its operations: their
// functions see batchClock's clock() in place of record.lua's. A batch is
// one script, during which Redis checks expiry against the time the script
// started; its operations now use that same instant. (A local, not a
// variable of record.lua: in the function library of Options.Functions,
// record.lua's variables live on from one FCALL to the next.)
var batchScript = newScript("batch", func() string {
	var b strings.Builder
	b.WriteString(batchClock)
	for i, s := range batchOps {
		s.op = strconv.Itoa(i + 1)
		fmt.Fprintf(&b, "local function op_%s(KEYS, ARGV)\n%s\nend\n", s.name, s.body)
	}
	b.WriteString("local OPS = {")
	for i, s := range batchOps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("op_" + s.name)
	}
	b.WriteString("}\n")
	b.WriteString(batchLua)
	return b.String()
}())

// batchClock is the clock of a batch's operations: record.lua's, read once.
const batchClock = `local batch_ms, batch_t = clock()
local function clock() return batch_ms, batch_t end
`

// Bounds of one batch: its operations, and the bytes of their arguments
// (a request body is one), so that neither a script call nor its reply
// grows with the load. An operation larger than coalesceMaxBytes goes in
// a batch of its own.
const (
	coalesceMaxOps   = 64
	coalesceMaxBytes = 1 << 20
)

// coalesceInFlight is how many script calls of one store may be in flight
// at once before further operations queue for the next batch. With one,
// the server waited while the client turned a batch's reply into answers
// and the next batch (BenchmarkCoalesceProfile: 0.7 of the two cores idle,
// the Redis thread busy 0.6); two overlap that turnaround with the other
// batch. Three made batches smaller and measured no faster.
const coalesceInFlight = 2

// CoalesceStats counts what Options.Coalesce did, since the store was made.
type CoalesceStats struct {
	// Single are operations sent alone, by their own script: nothing else
	// was waiting when they came, or they were alone in the queue.
	Single uint64
	// Batches are batch script calls, each carrying two or more operations.
	Batches uint64
	// Carried are the operations those batches carried.
	Carried uint64
	// Largest is the most operations one batch carried.
	Largest uint64
}

// answer is one batched operation's reply, or its script's error.
type answer struct {
	r   reply
	err error
}

// batchRunner is a runner that also runs batchScript.
type batchRunner interface {
	runner
	// runBatch runs batchScript and returns one answer per operation.
	runBatch(ctx context.Context, keys []string, args []any) ([]answer, error)
}

// coalescer is the runner of Options.Coalesce: group commit. A call that
// comes while fewer than coalesceInFlight calls are in flight goes out at
// once, by its own script, as without coalescing: no timer, no wait. A call
// that comes while they are in flight queues; when a call returns, its
// sender takes everything queued (up to the bounds) and sends it as one
// batch, in a goroutine of its own, so that no caller waits for another's
// batch.
type coalescer struct {
	batchRunner

	mu       sync.Mutex
	inFlight int        // guarded by mu
	queue    []*pending // guarded by mu: in arrival order

	single, batches, carried, largest atomic.Uint64
}

// pending is a queued operation. r and err are set before done is closed.
type pending struct {
	ctx  context.Context
	sc   *script
	keys []string
	args []any
	size int // its arguments' bytes
	done chan struct{}
	r    reply
	err  error
}

func newCoalescer(r batchRunner) *coalescer { return &coalescer{batchRunner: r} }

func (c *coalescer) run(ctx context.Context, sc *script, keys []string, args []any) (reply, error) {
	if sc.op == nil {
		return c.batchRunner.run(ctx, sc, keys, args)
	}
	c.mu.Lock()
	if c.inFlight < coalesceInFlight {
		c.inFlight++
		c.mu.Unlock()
		r, err := c.batchRunner.run(ctx, sc, keys, args)
		c.single.Add(1)
		if next := c.next(); next != nil {
			go c.sendAll(next)
		}
		return r, err
	}
	p := &pending{ctx: ctx, sc: sc, keys: keys, args: args, size: argBytes(args), done: make(chan struct{})}
	c.queue = append(c.queue, p)
	c.mu.Unlock()
	select {
	case <-p.done:
		return p.r, p.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if i := slices.Index(c.queue, p); i >= 0 {
		// Still queued: it never runs.
		c.queue = slices.Delete(c.queue, i, i+1)
		c.mu.Unlock()
		return reply{}, ctx.Err()
	}
	c.mu.Unlock()
	select {
	case <-p.done:
		return p.r, p.err
	default:
		// Sent, and not answered yet: as a single script whose reply did
		// not come in time, it may have run or not.
		return reply{}, fmt.Errorf("the batch carrying this call is in flight: %w", ctx.Err())
	}
}

// next takes the next batch from the queue; when the queue is empty it
// gives up the caller's place in flight and returns nil.
func (c *coalescer) next() []*pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) == 0 {
		c.inFlight--
		return nil
	}
	n, size := 0, 0
	for ; n < len(c.queue) && n < coalesceMaxOps; n++ {
		if size += c.queue[n].size; n > 0 && size > coalesceMaxBytes {
			break
		}
	}
	batch := c.queue[:n:n]
	if c.queue = c.queue[n:]; len(c.queue) == 0 {
		c.queue = nil
	}
	return batch
}

// sendAll sends batch, then the batches queued meanwhile, until the
// queue is empty.
func (c *coalescer) sendAll(batch []*pending) {
	for ; batch != nil; batch = c.next() {
		c.send(batch)
	}
}

func (c *coalescer) send(batch []*pending) {
	if len(batch) == 1 {
		p := batch[0]
		p.r, p.err = c.batchRunner.run(p.ctx, p.sc, p.keys, p.args)
		c.single.Add(1)
		close(p.done)
		return
	}
	var nkeys, nargs int
	for _, p := range batch {
		nkeys, nargs = nkeys+len(p.keys), nargs+3+len(p.args)
	}
	keys, args := make([]string, 0, nkeys), make([]any, 0, nargs)
	for _, p := range batch {
		keys = append(keys, p.keys...)
		args = append(args, p.sc.op, smallInt(len(p.keys)), smallInt(len(p.args)))
		args = append(args, p.args...)
	}
	ctx, cancel := batchContext(batch)
	answers, err := c.runBatch(ctx, keys, args)
	cancel()
	if err == nil && len(answers) != len(batch) {
		err = fmt.Errorf("batch of %d operations answered %d replies", len(batch), len(answers))
	}
	c.batches.Add(1)
	c.carried.Add(uint64(len(batch)))
	for n := uint64(len(batch)); ; {
		l := c.largest.Load()
		if n <= l || c.largest.CompareAndSwap(l, n) {
			break
		}
	}
	for i, p := range batch {
		if err != nil {
			p.err = err
		} else {
			p.r, p.err = answers[i].r, answers[i].err
		}
		close(p.done)
	}
}

// batchContext returns the context of a batch's script call. When every
// caller has a deadline it is the latest of them, so that a stalled server
// holds the batch no longer than its callers; one timer for the batch,
// nothing per caller (a cancelled caller stops waiting in run on its own
// context; following each caller's cancellation here would only end the
// batch's own wait sooner). Otherwise it ends when the last of its
// callers' contexts does (nobody waits for the reply any more).
func batchContext(batch []*pending) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, p := range batch {
		d, ok := p.ctx.Deadline()
		if !ok {
			return lastCallerContext(batch)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

// lastCallerContext returns a context that ends when the last of the
// batch's callers' contexts does.
func lastCallerContext(batch []*pending) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	left := new(atomic.Int64)
	left.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, p := range batch {
		stops[i] = context.AfterFunc(p.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// argBytes is about how many bytes args take in a script call.
func argBytes(args []any) int {
	n := 0
	for _, a := range args {
		switch a := a.(type) {
		case string:
			n += len(a)
		case []byte:
			n += len(a)
		default:
			n += 8
		}
	}
	return n
}

// smallInts are the counts a batch passes most, as script arguments: a
// string in an interface, made once (boxing one allocates).
var smallInts = func() (s [16]any) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

// smallInt formats a count of keys or arguments (at most maxScriptArgs).
func smallInt(n int) any {
	if n < len(smallInts) {
		return smallInts[n]
	}
	return strconv.Itoa(n)
}

func (c *coalescer) stats() CoalesceStats {
	return CoalesceStats{Single: c.single.Load(), Batches: c.batches.Load(), Carried: c.carried.Load(), Largest: c.largest.Load()}
}

// errCoalesceReplicaAcks refuses Options.Coalesce with Options.ReplicaAcks.
var errCoalesceReplicaAcks = errors.New("redisstore: Coalesce and ReplicaAcks do not combine: " +
	"the writes that wait for replicas run one script each, with WAIT on its connection; choose one")
