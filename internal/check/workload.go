package check

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// Workload says how clients use the engines in a run.
type Workload struct {
	Clients   int           // goroutines sending requests
	Keys      int           // idempotency keys they share
	Processes int           // engines, each on its own store client (one application server each)
	Duration  time.Duration // how long clients send requests
	Lease     time.Duration // the engines' lease
	// Timed is false when the store's clock jumps (see recStore).
	Timed bool
	// Steps, when set, bounds a run by operations, not by Duration: each
	// client takes about Steps steps (drawn from the seed, from 3/4 to
	// 5/4 of it), and the nemesis injects from 1 to Faults faults, each
	// once the clients have taken its share of their steps; so what a run
	// does does not depend on how loaded the machine is.
	Steps, Faults int
	// done counts the steps the clients took (with Steps).
	done *atomic.Int64
}

// bySteps draws the run's steps and faults from its seed (Workload.Steps).
func (w Workload) bySteps(seed uint64) Workload {
	if w.Steps == 0 {
		return w
	}
	rng := rand.New(rand.NewPCG(seed, 2<<32))
	w.Steps = w.Steps*3/4 + rng.IntN(w.Steps/2+1)
	w.Faults = 1 + rng.IntN(max(w.Faults, 1))
	w.done = &atomic.Int64{}
	return w
}

// process is one application server: an engine on its own store client.
type process struct {
	eng     *idem.Engine
	useDo   bool // Engine.Do, else Begin and the Lease
	dedup   bool // TakeoverRun: the ledger deduplicates by key
	stall   float64
	ledger  *Ledger
	rec     *Recorder
	tenant  string
	timeout time.Duration
}

var errNotStarted = errors.New("check: the lease ended before the effect; not started")

// newProcess builds process i of the run on store s: one in three takes
// over ended leases (TakeoverRun) instead of turning them UNKNOWN, one in
// three reconciles UNKNOWN keys with the ledger; every other one renews
// its lease (in the others a stall outlives it); each uses Do or Begin as
// rng draws.
func newProcess(i int, s store.Store, w Workload, rng *rand.Rand, l *Ledger, rec *Recorder, tenant string) (*process, error) {
	o := &idem.Options{LeaseDuration: w.Lease, Retention: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ReconcileTimeout: w.Lease}
	if i%2 == 0 {
		o.RenewEvery = -1
	}
	p := &process{useDo: rng.IntN(2) == 0, ledger: l, rec: rec, tenant: tenant, stall: 0.05, timeout: 4 * w.Lease}
	switch i % 3 { // every run has each policy (with three processes)
	case 0:
		o.Takeover, p.dedup = idem.TakeoverRun, true
	case 1:
		o.Reconcile = func(ctx context.Context, r store.Record) (idem.Resolution, error) {
			if v, ok := l.Lookup(keyOf(r.ID), r.Fence); ok {
				return idem.Resolution{Verdict: idem.VerdictCompleted, Result: store.Result{Body: []byte(v)}}, nil
			}
			return idem.Resolution{Verdict: idem.VerdictNotExecuted}, nil
		}
	}
	var err error
	p.eng, err = idem.New(s, o)
	return p, err
}

// ledgerFault draws what the ledger does to one call: mostly nothing; a
// refusal (the work did not run, the key is released); or a lost reply
// (the work ran, the outcome is unknown to the caller).
func ledgerFault(rng *rand.Rand) fault {
	switch r := rng.Float64(); {
	case r < 0.04:
		return refuse
	case r < 0.08:
		return loseReply
	}
	return noFault
}

// sleep waits d, or less if ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// request runs one request for key on p. It reports whether the store
// failed (the client backs off, as it would on a 503).
func (p *process) request(ctx context.Context, rng *rand.Rand, key string, lease time.Duration) (storeFailed bool) {
	fp := "fp"
	if rng.IntN(50) == 0 {
		fp = "fp-other" // a key reused for another request: Mismatch
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req := idem.Request{Tenant: p.tenant, Key: key, Fingerprint: fp}
	id := p.tenant + "/" + key
	stallBefore, stallAfter := rng.Float64() < p.stall, rng.Float64() < p.stall
	f := ledgerFault(rng)
	call := p.rec.Now()
	if p.useDo {
		out, replayed, err := p.eng.Do(ctx, req, func(ctx context.Context, l *idem.Lease) ([]byte, error) {
			if stallBefore {
				sleep(ctx, lease*3/2)
			}
			if ctx.Err() != nil {
				return nil, idem.NotRun(errNotStarted)
			}
			v, err := p.ledger.Apply(id, l.Fence(), p.dedup, f, call)
			switch {
			case errors.Is(err, errLedgerReplyLost):
				return nil, idem.OutcomeUnknown(err, "the ledger's reply was lost")
			case err != nil: // stale or refused: not applied
				return nil, idem.NotRun(err)
			}
			if stallAfter {
				sleep(context.WithoutCancel(ctx), lease*3/2)
			}
			return []byte(v), nil
		})
		if err == nil {
			p.rec.give(Given{Key: id, Body: string(out), Replay: replayed, Call: call, Return: p.rec.Now()})
		}
		return errors.Is(err, idem.ErrStore)
	}
	att, err := p.eng.Begin(ctx, req)
	if err != nil {
		return errors.Is(err, idem.ErrStore)
	}
	switch att.Outcome {
	case idem.Replayed:
		r := att.Result
		p.rec.give(Given{Key: id, Body: string(r.Body), Full: EncodeResult(r.Status, r.Header, r.Body), Replay: true,
			Call: call, Return: p.rec.Now()})
	case idem.Acquired:
		p.work(ctx, att.Lease, id, f, stallBefore, stallAfter, lease, call)
	}
	return false
}

// work is the work of an acquired lease through the Lease API: check the
// lease right before the effect, then complete, mark unknown or release
// by what the ledger answered.
func (p *process) work(ctx context.Context, l *idem.Lease, id string, f fault, stallBefore, stallAfter bool, lease time.Duration, call int64) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), idem.FinalizeTimeout)
	defer cancel()
	// Nothing ran: release, unless the lease took over an attempt whose
	// outcome is unknown (Lease.Release).
	notRun := func() {
		if l.PreviousFence() != 0 {
			_ = l.MarkUnknown(fctx, "failed after a takeover")
			return
		}
		_ = l.Release(fctx)
	}
	if stallBefore {
		sleep(ctx, lease*3/2)
	}
	if l.Check() != nil {
		notRun()
		return
	}
	v, err := p.ledger.Apply(id, l.Fence(), p.dedup, f, call)
	switch {
	case errors.Is(err, errLedgerReplyLost):
		_ = l.MarkUnknown(fctx, "ledger reply lost")
		return
	case err != nil:
		notRun()
		return
	}
	if stallAfter {
		sleep(fctx, lease*3/2)
	}
	res := store.Result{Body: []byte(v)}
	if l.Complete(fctx, res) == nil {
		p.rec.give(Given{Key: id, Body: v, Full: EncodeResult(0, nil, res.Body), Call: call, Return: p.rec.Now()})
	}
}

// takeoverProbe ends every run, its faults healed, with a takeover: the
// process that neither renews nor takes over (2) takes a key of its own
// and lets its lease end, as a stalled worker does, and the TakeoverRun
// process (0) takes the key over, whose fence must be above the ended
// attempt's, and then the ended attempt's late Complete must be refused.
// A takeover otherwise waits for a drawn stall to meet that
// process on the same key, which some runs never draw (a short campaign
// once took seven runs to show takeover-keeps-fence).
func takeoverProbe(ctx context.Context, procs []*process, tenant string, seed uint64) {
	if len(procs) < 3 {
		return
	}
	req := idem.Request{Tenant: tenant, Key: fmt.Sprintf("probe-takeover-%d", seed), Fingerprint: "fp"}
	att, err := procs[2].eng.Begin(ctx, req)
	if err != nil || att.Outcome != idem.Acquired {
		return
	}
	defer att.Lease.Close() // lost by then: it changes nothing
	<-att.Lease.Context().Done()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; sleep(ctx, 10*time.Millisecond) {
		a, err := procs[0].eng.Begin(ctx, req)
		if err == nil && a.Outcome == idem.Acquired {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), idem.FinalizeTimeout)
			defer cancel()
			// The ended attempt's late Complete must find the key is not
			// its own any more (ErrLeaseLost): one that answers success
			// is a stale owner's write over the takeover's.
			_ = att.Lease.Complete(fctx, store.Result{Body: []byte("the stalled attempt's late result")})
			_ = a.Lease.MarkUnknown(fctx, "the takeover probe: nothing ran")
			return
		}
		if err == nil && a.Outcome != idem.InFlight { // the store's clock may trail the lease's by a tick; else done
			return
		}
	}
}

// operate is what an operator does to key: delete it (rarely), or
// resolve it by the ledger's answer when it is UNKNOWN (and sometimes
// when it is not).
func (p *process) operate(ctx context.Context, rng *rand.Rand, key string) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	id := store.ID{Tenant: p.tenant, Key: key}
	if rng.IntN(4) == 0 {
		// Delete removes a COMPLETED key only (fence-checked); ForceDelete
		// any, the operator's knowing choice to let it run again.
		if rng.IntN(2) == 0 {
			_, _ = p.eng.ForceDelete(ctx, id)
		} else {
			_, _ = p.eng.Delete(ctx, id)
		}
		return
	}
	rec, err := p.eng.Get(ctx, id)
	if err != nil || (rec.State != store.StateUnknown && rng.IntN(3) > 0) {
		return
	}
	// Resolve by the ledger's word; now and then on a record that is not
	// UNKNOWN, as an operator acting on an old listing does: the store
	// must refuse it.
	var res *store.Result
	if v, ok := p.ledger.Lookup(keyOf(id), rec.Fence); ok {
		res = &store.Result{Body: []byte(v)}
	}
	_ = p.eng.Resolve(ctx, id, rec.Fence, res)
}

// clients runs w.Clients clients over procs until ctx ends or the
// duration passes.
func clients(ctx context.Context, w Workload, seed uint64, procs []*process, keys []string) {
	clientLoop(ctx, w, seed, func(ctx context.Context, rng *rand.Rand) bool {
		key := keys[rng.IntN(len(keys))]
		p := procs[rng.IntN(len(procs))]
		if rng.IntN(25) == 0 {
			p.operate(ctx, rng, key)
			return false
		}
		return p.request(ctx, rng, key, w.Lease)
	})
}

// clientLoop runs w.Clients clients, each with its own random source from
// seed, that call step until ctx ends or the duration passes (or, with
// w.Steps, each has taken that many steps), pausing up to a tenth of a
// lease between steps, and two leases after a step that reports the store
// down (a client backs off on a 503).
func clientLoop(ctx context.Context, w Workload, seed uint64, step func(ctx context.Context, rng *rand.Rand) (storeDown bool)) {
	if w.Steps == 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.Duration)
		defer cancel()
	}
	var wg sync.WaitGroup
	for c := range w.Clients {
		rng := rand.New(rand.NewPCG(seed, uint64(c)+1))
		wg.Go(func() {
			for n := 0; ctx.Err() == nil && (w.Steps == 0 || n < w.Steps); n++ {
				pause := time.Duration(rng.IntN(int(w.Lease/10) + 1))
				if step(ctx, rng) {
					pause = 2 * w.Lease
				}
				if w.done != nil {
					w.done.Add(1)
				}
				sleep(ctx, pause)
			}
		})
	}
	wg.Wait()
}

// runKeys names the keys of one run: unique to its seed, so runs on one
// server never share a key.
func runKeys(seed uint64, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "r" + strconv.FormatUint(seed, 36) + "-k" + strconv.Itoa(i)
	}
	return keys
}
