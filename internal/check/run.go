package check

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// Nemesis injects one kind of real fault.
type Nemesis interface {
	// Name says what the fault is.
	Name() string
	// Inject starts the fault; heal ends it (a no-op for a fault that is
	// over once done, like a crash whose restart is part of it). heal runs
	// even when ctx has ended.
	Inject(ctx context.Context, rng *rand.Rand) (heal func() error, err error)
}

// clockNemesis is a Nemesis that moves a clock the store reads: the model
// then cannot bound when a lease ends.
type clockNemesis interface{ movesClock() }

// Env is a configuration's store, set up once and shared by its runs.
type Env struct {
	// NewStore opens a client of the store, one per process of a run;
	// close ends it.
	NewStore func(ctx context.Context, prefix string) (s store.Store, close func(), err error)
	// Nemeses are the faults runs pick from.
	Nemeses []Nemesis
	// Staleness is how long after a delete a near cache may replay the
	// deleted record (Options.Staleness).
	Staleness time.Duration
	// Clients, when set, replaces the engines of a run: its clients reach
	// the store through processes the recorder does not see (HTTP to
	// gateways), record the results they are given and their deletes
	// (Recorder.external), and the history is held to the invariants.
	Clients func(ctx context.Context, w Workload, seed uint64, rec *Recorder, l *Ledger, tenant string, keys []string)
	// StartRun, when set, runs before each run (a fresh in-process store).
	StartRun func() error
	// Prepare, when set, runs before each run of an Env with Clients,
	// before the nemesis starts: it sets the run up from its seed (the
	// product check starts its gateways on a configuration drawn from it)
	// and returns that configuration's text, kept with the history.
	Prepare func(ctx context.Context, seed uint64) (config string, err error)
	// Finish, when set, runs after the run's faults are healed, on an Env
	// with Clients: the checks that need the system quiet (which keys the
	// admin API lists UNKNOWN). What it finds joins History.Seen.
	Finish func(ctx context.Context) ([]Violation, error)
	// Life, when set, gives after each run the life of its keys
	// (History.Life).
	Life func() map[string]int64
	// Settle, when set, runs after each run's faults are healed, until
	// the store serves again (a failover done, a replica in sync).
	Settle func(ctx context.Context) error
	// Keep, when set, writes into dir what a run that failed leaves
	// beside its history (the product check's gateway logs).
	Keep func(dir string) error
}

// RunStats counts what one run did.
type RunStats struct {
	Ops, Faults int
	Nemeses     []string
}

// Run runs one seeded run of w against env: clients on fresh keys, and a
// nemesis that injects faults from a mix drawn by the seed; then a final
// read of every key once the faults are healed.
func Run(ctx context.Context, env *Env, w Workload, seed uint64) (History, RunStats, error) {
	rng := rand.New(rand.NewPCG(seed, 0))
	var mix []Nemesis
	for _, n := range env.Nemeses {
		if rng.IntN(5) < 3 {
			mix = append(mix, n)
		}
	}
	if len(mix) == 0 && len(env.Nemeses) > 0 {
		mix = append(mix, env.Nemeses[rng.IntN(len(env.Nemeses))])
	}
	st := RunStats{}
	w = w.bySteps(seed)
	w.Timed = true
	for _, n := range mix {
		st.Nemeses = append(st.Nemeses, n.Name())
		if _, ok := n.(clockNemesis); ok {
			w.Timed = false
		}
	}
	if env.StartRun != nil {
		if err := env.StartRun(); err != nil {
			return History{}, st, err
		}
	}
	rec := NewRecorder()
	ledger := NewLedger(rec)
	tenant := fmt.Sprintf("t%d", seed)
	var procs []*process
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	keys := runKeys(seed, w.Keys)
	if env.Clients != nil {
		return runExternal(ctx, env, w, seed, rng, mix, st, rec, ledger, tenant, keys)
	}
	for i := range w.Processes {
		s, closeStore, err := env.NewStore(ctx, fmt.Sprintf("chk:%d:", seed))
		if err != nil {
			return History{}, st, err
		}
		closers = append(closers, closeStore)
		p, err := newProcess(i, &recStore{s: s, rec: rec, timed: w.Timed}, w, rng, ledger, rec, tenant)
		if err != nil {
			return History{}, st, err
		}
		procs = append(procs, p)
	}
	// Before the stores close: the engines' held finalizations are stored
	// or dropped (each is retried at most to its lease's end or
	// FinalizeTimeout), so no retry outlives the run.
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), idem.FinalizeTimeout+4*w.Lease+time.Second)
		defer cancel()
		for _, p := range procs {
			_ = p.eng.Shutdown(fctx)
		}
	}()
	nctx, stopNemesis := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var nemErr error
	wg.Go(func() { st.Faults, nemErr = nemesis(nctx, mix, rand.New(rand.NewPCG(seed, 1<<32)), w) })
	clients(ctx, w, seed, procs, keys)
	stopNemesis()
	wg.Wait()
	if nemErr != nil {
		return History{}, st, nemErr
	}
	if env.Settle != nil {
		if err := env.Settle(ctx); err != nil {
			return History{}, st, fmt.Errorf("settle after the faults: %w", err)
		}
	}
	takeoverProbe(ctx, procs, tenant, seed)
	if err := finalReads(ctx, procs[0], keys); err != nil {
		return History{}, st, err
	}
	h := History{Ops: rec.Ops(), Given: rec.Given(), Effects: ledger.Effects()}
	st.Ops = len(h.Ops)
	return h, st, nil
}

// runExternal is Run for an Env with Clients.
func runExternal(ctx context.Context, env *Env, w Workload, seed uint64, rng *rand.Rand, mix []Nemesis, st RunStats,
	rec *Recorder, ledger *Ledger, tenant string, keys []string) (History, RunStats, error) {
	var config string
	if env.Prepare != nil {
		var err error
		if config, err = env.Prepare(ctx, seed); err != nil {
			return History{}, st, err
		}
	}
	nctx, stopNemesis := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var nemErr error
	wg.Go(func() { st.Faults, nemErr = nemesis(nctx, mix, rand.New(rand.NewPCG(seed, 1<<32)), w) })
	env.Clients(ctx, w, seed, rec, ledger, tenant, keys)
	stopNemesis()
	wg.Wait()
	if nemErr != nil {
		return History{}, st, nemErr
	}
	if env.Finish != nil {
		seen, err := env.Finish(ctx)
		if err != nil {
			return History{}, st, err
		}
		rec.saw(seen...)
	}
	// After Finish: what it did is part of the history.
	h := History{Given: rec.Given(), Effects: ledger.Effects(), External: rec.External(), Seen: rec.Seen(), Config: config}
	if env.Life != nil {
		h.Life = env.Life()
	}
	st.Ops = len(h.Given) + len(h.External)
	return h, st, nil
}

// nemesis injects faults from mix until ctx ends: a pause of one to three
// leases, a fault that lasts a half to three leases, healed, and again.
// With w.Steps, it injects w.Faults faults instead, fault i once the
// clients have taken i/(Faults+1) of their steps.
func nemesis(ctx context.Context, mix []Nemesis, rng *rand.Rand, w Workload) (int, error) {
	lease := w.Lease
	faults := 0
	if len(mix) == 0 {
		return 0, nil
	}
	for {
		if w.Steps == 0 {
			sleep(ctx, lease+time.Duration(rng.Int64N(int64(2*lease))))
		} else {
			if faults == w.Faults {
				return faults, nil
			}
			at := int64(w.Clients*w.Steps) * int64(faults+1) / int64(w.Faults+1)
			for w.done.Load() < at && ctx.Err() == nil {
				sleep(ctx, 5*time.Millisecond)
			}
		}
		if ctx.Err() != nil {
			return faults, nil
		}
		n := mix[rng.IntN(len(mix))]
		heal, err := n.Inject(ctx, rng)
		if err != nil {
			if ctx.Err() != nil {
				return faults, nil
			}
			return faults, fmt.Errorf("nemesis %s: %w", n.Name(), err)
		}
		faults++
		sleep(ctx, lease/2+time.Duration(rng.Int64N(int64(5*lease/2))))
		if err := heal(); err != nil {
			return faults, fmt.Errorf("nemesis %s: heal: %w", n.Name(), err)
		}
	}
}

// finalReads reads every key once the faults are over (retrying while
// the store does not answer), so that what the faults lost is seen.
func finalReads(ctx context.Context, p *process, keys []string) error {
	for _, k := range keys {
		deadline := time.Now().Add(30 * time.Second)
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := p.eng.Get(rctx, store.ID{Tenant: p.tenant, Key: k})
			cancel()
			if err == nil || errors.Is(err, idem.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("final read of %s: %w", k, err)
			}
			sleep(ctx, 100*time.Millisecond)
		}
	}
	return nil
}
