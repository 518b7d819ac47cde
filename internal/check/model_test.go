package check

import (
	"encoding/json"
	"math"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// hist builds a history of one key from operations that each run alone,
// in order, 10 time units apart, unless an op sets its own times.
type hist struct{ ops []Op }

func (h *hist) add(in Input, out Output) *hist {
	t := int64(len(h.ops)+1) * 10
	ret := t + 5
	if out.Info {
		ret = math.MaxInt64
	}
	in.Key, in.Call, in.Return = "t/k", t, ret
	h.ops = append(h.ops, Op{Call: t, Return: ret, In: in, Out: out})
	return h
}

func (h *hist) check(t *testing.T, o Options) porcupine.CheckResult {
	t.Helper()
	return Check(History{Ops: h.ops}, o, 10*time.Second).Linearizable
}

func acquire(owner string, takeOver bool) Input {
	return Input{Kind: KAcquire, Owner: owner, FP: "fp", TakeOver: takeOver}
}

func rec(st byte, owner string, fence int64, extra string) *View {
	v := &View{State: st, Owner: owner, Fence: fence, FP: "fp"}
	switch st {
	case 'C':
		v.Result = extra
	case 'U':
		v.Reason = extra
	}
	return v
}

// TestModelAcceptsTheStateMachine walks the transitions of
// docs/state-machine.md; every history here is legal.
func TestModelAcceptsTheStateMachine(t *testing.T) {
	cases := map[string]*hist{
		"acquire complete replay": new(hist).
			add(acquire("a", false), Output{Acquired: true, Fence: 5}).
			add(acquire("b", false), Output{Rec: rec('P', "a", 5, "")}).
			add(Input{Kind: KComplete, Owner: "a", Fence: 5, Result: "r1"}, Output{}).
			add(Input{Kind: KComplete, Owner: "a", Fence: 5, Result: "r2"}, Output{}). // a retried Complete keeps r1
			add(acquire("c", false), Output{Rec: rec('C', "a", 5, "r1")}).
			add(Input{Kind: KComplete, Owner: "b", Fence: 5, Result: "r3"}, Output{Err: "lost"}),
		"abandoned then late complete": new(hist).
			add(acquire("a", false), Output{Acquired: true, Fence: 5}).
			add(acquire("b", false), Output{Rec: rec('U', "a", 5, "abandoned")}).
			add(Input{Kind: KComplete, Owner: "a", Fence: 5, Result: "r1"}, Output{}).
			add(Input{Kind: KGet}, Output{Rec: rec('C', "a", 5, "r1")}),
		"takeover, stale owner refused": new(hist).
			add(acquire("a", true), Output{Acquired: true, Fence: 5}).
			add(acquire("b", true), Output{Acquired: true, Fence: 9, Took: 5}).
			add(Input{Kind: KRelease, Owner: "a", Fence: 5}, Output{Err: "lost"}).
			add(Input{Kind: KExtend, Owner: "b", Fence: 9}, Output{}),
		"takeover by another request: the key is UNKNOWN from then on": new(hist).
			add(acquire("a", true), Output{Acquired: true, Fence: 5}).
			add(Input{Kind: KAcquire, Owner: "b", FP: "fp-other", TakeOver: true}, Output{Rec: rec('U', "a", 5, "abandoned")}).
			add(acquire("c", true), Output{Rec: rec('U', "a", 5, "abandoned")}).
			add(Input{Kind: KRelease, Owner: "a", Fence: 5}, Output{}). // its owner knows it did not run
			add(acquire("d", true), Output{Acquired: true, Fence: 6}),
		"mark unknown, claim, resolve not executed, run again": new(hist).
			add(acquire("a", false), Output{Acquired: true, Fence: 5}).
			add(Input{Kind: KMarkUnknown, Owner: "a", Fence: 5, Reason: "cut"}, Output{}).
			add(Input{Kind: KRelease, Owner: "a", Fence: 5}, Output{Err: "lost"}).
			add(Input{Kind: KClaim, Owner: "r"}, Output{Claimed: true, Rec: rec('U', "a", 5, "cut")}).
			add(Input{Kind: KClaim, Owner: "s"}, Output{Rec: rec('U', "a", 5, "cut")}).
			add(Input{Kind: KResolve, Fence: 5, Claim: "r"}, Output{}).
			add(acquire("b", false), Output{Acquired: true, Fence: 6}),
		"lost acquire reply: the record is found later": new(hist).
			add(acquire("a", false), Output{Info: true}).
			add(acquire("b", false), Output{Rec: rec('P', "a", 7, "")}).
			add(Input{Kind: KRelease, Owner: "a", Fence: 7}, Output{}).
			add(acquire("c", false), Output{Acquired: true, Fence: 8}),
		"lost acquire reply: nothing happened": new(hist).
			add(acquire("a", false), Output{Info: true}).
			add(acquire("b", false), Output{Acquired: true, Fence: 3}),
		"delete": new(hist).
			add(acquire("a", false), Output{Acquired: true, Fence: 5}).
			add(Input{Kind: KComplete, Owner: "a", Fence: 5, Result: "r1"}, Output{}).
			add(Input{Kind: KDelete}, Output{Existed: true}).
			add(Input{Kind: KGet}, Output{Err: "notfound"}).
			add(acquire("b", false), Output{Acquired: true, Fence: 6}),
	}
	for name, h := range cases {
		if got := h.check(t, Options{}); got != porcupine.Ok {
			t.Errorf("%s: %v, want Ok", name, got)
		}
	}
}

// TestModelRejects: each history breaks one rule of the state machine,
// the kind of thing each mutation of scripts/mutate.sh does to the code.
func TestModelRejects(t *testing.T) {
	done := func() *hist {
		return new(hist).add(acquire("a", false), Output{Acquired: true, Fence: 5}).
			add(Input{Kind: KComplete, Owner: "a", Fence: 5, Result: "r1"}, Output{})
	}
	cases := map[string]*hist{
		"complete by another owner": new(hist).
			add(acquire("a", false), Output{Acquired: true, Fence: 5}).
			add(Input{Kind: KComplete, Owner: "b", Fence: 5, Result: "r"}, Output{}),
		"a second acquisition of a live lease": new(hist).
			add(acquire("a", false), Output{Acquired: true, Fence: 5}).
			add(acquire("b", false), Output{Acquired: true, Fence: 6}),
		"takeover that keeps the old fence": new(hist).
			add(acquire("a", true), Output{Acquired: true, Fence: 5}).
			add(acquire("b", true), Output{Acquired: true, Fence: 5, Took: 5}),
		"another request takes over an ended lease": new(hist).
			add(acquire("a", true), Output{Acquired: true, Fence: 5}).
			add(Input{Kind: KAcquire, Owner: "b", FP: "fp-other", TakeOver: true}, Output{Acquired: true, Fence: 9, Took: 5}),
		"a takeover after another request found the key UNKNOWN": new(hist).
			add(acquire("a", true), Output{Acquired: true, Fence: 5}).
			add(Input{Kind: KAcquire, Owner: "b", FP: "fp-other", TakeOver: true}, Output{Rec: rec('U', "a", 5, "abandoned")}).
			add(acquire("c", true), Output{Acquired: true, Fence: 9, Took: 5}),
		"resolve overwrites a COMPLETED record": done().
			add(Input{Kind: KResolve, Fence: 5, HasResult: true, Result: "r2"}, Output{}),
		"a replay after a delete": done().
			add(Input{Kind: KDelete}, Output{Existed: true}).
			add(acquire("b", false), Output{Rec: rec('C', "a", 5, "r1")}),
		"a replay of another result": done().
			add(acquire("b", false), Output{Rec: rec('C', "a", 5, "r2")}),
		"extend revives an ended lease": new(hist).
			add(acquire("a", false), Output{Acquired: true, Fence: 5}).
			add(acquire("b", false), Output{Rec: rec('U', "a", 5, "abandoned")}).
			add(Input{Kind: KExtend, Owner: "a", Fence: 5}, Output{}),
		"release of a record its owner marked UNKNOWN": new(hist).
			add(acquire("a", false), Output{Acquired: true, Fence: 5}).
			add(Input{Kind: KMarkUnknown, Owner: "a", Fence: 5, Reason: "cut"}, Output{}).
			add(Input{Kind: KRelease, Owner: "a", Fence: 5}, Output{}),
		"a lease that ends before its time": new(hist).
			add(Input{Kind: KAcquire, Owner: "a", FP: "fp", Lease: 1000}, Output{Acquired: true, Fence: 5}).
			add(acquire("b", false), Output{Rec: rec('U', "a", 5, "abandoned")}),
		"a lost write": done().
			add(acquire("b", false), Output{Acquired: true, Fence: 6}),
	}
	for name, h := range cases {
		if got := h.check(t, Options{}); got != porcupine.Illegal {
			t.Errorf("%s: %v, want Illegal", name, got)
		}
	}
}

// TestModelStaleness: with a near cache, a replay of a deleted record is
// legal within the staleness bound after the delete, and not after it.
func TestModelStaleness(t *testing.T) {
	h := func() *hist {
		return new(hist).add(acquire("a", false), Output{Acquired: true, Fence: 5}).
			add(Input{Kind: KComplete, Owner: "a", Fence: 5, Result: "r1"}, Output{}).
			add(Input{Kind: KDelete}, Output{Existed: true}).
			add(acquire("b", false), Output{Rec: rec('C', "a", 5, "r1")})
	}
	if got := h().check(t, Options{Staleness: 100}); got != porcupine.Ok {
		t.Errorf("within the bound: %v, want Ok", got)
	}
	if got := h().check(t, Options{Staleness: 2}); got != porcupine.Illegal {
		t.Errorf("past the bound: %v, want Illegal", got)
	}
}

func TestInvariants(t *testing.T) {
	del := Op{Call: 50, Return: 60, In: Input{Kind: KDelete, Key: "k"}}
	effects := []Effect{{Key: "k", Fence: 1, Value: "v1", At: 10, Began: 5}, {Key: "k", Fence: 2, Value: "v2", At: 40, Began: 30}}
	if v := checkEffects(effects, nil, nil, nil); len(v) != 1 {
		t.Errorf("two effects, no delete: %v", v)
	}
	effects[1].At = 70
	if v := checkEffects(effects, nil, deletes([]Op{del}), nil); len(v) != 0 {
		t.Errorf("two effects around a delete: %v", v)
	}
	// A delete while the first request was in flight, before its effect:
	// its lease was lost, and the work may run again.
	inFlight := []Effect{{Key: "k", Fence: 1, Value: "v1", At: 62, Began: 45}, {Key: "k", Fence: 2, Value: "v2", At: 90, Began: 80}}
	if v := checkEffects(inFlight, nil, deletes([]Op{del}), nil); len(v) != 0 {
		t.Errorf("a delete during the first request: %v", v)
	}
	if v := checkEffects(inFlight, nil, nil, nil); len(v) != 1 {
		t.Errorf("the same without the delete: %v", v)
	}
	// A key with a life runs again once it is past: only when a client
	// got the first effect's result (its record was COMPLETED); an effect
	// whose result nobody got may have left the key UNKNOWN, kept until
	// settled.
	lives := map[string]int64{"k": 20}
	late := []Effect{{Key: "k", Fence: 1, Value: "v1", At: 10, Began: 5}, {Key: "k", Fence: 2, Value: "v2", At: 40, Began: 30}}
	if v := checkEffects(late, []Given{{Key: "k", Body: "v1", Call: 5, Return: 12}}, nil, lives); len(v) != 0 {
		t.Errorf("a run after the life of a completed key: %v", v)
	}
	if v := checkEffects(late, nil, nil, lives); len(v) != 1 {
		t.Errorf("a run after the life of a key whose result no client got (UNKNOWN, kept until settled): %v", v)
	}
	acq := func(f, call, ret int64) Op {
		return Op{Call: call, Return: ret, In: Input{Kind: KAcquire, Key: "k"}, Out: Output{Acquired: true, Fence: f}}
	}
	if v := checkFences([]Op{acq(5, 0, 10), acq(4, 20, 30)}); len(v) != 1 {
		t.Errorf("a lower fence after a higher one: %v", v)
	}
	if v := checkFences([]Op{acq(5, 0, 30), acq(4, 20, 40)}); len(v) != 0 {
		t.Errorf("concurrent acquisitions: %v", v)
	}
	given := []Given{{Key: "k", Body: "v1", Call: 10, Return: 20}, {Key: "k", Body: "v2", Call: 30, Return: 40}}
	if v := checkGiven(given, effects, nil, nil); len(v) != 1 {
		t.Errorf("two results for a key: %v", v)
	}
	if v := checkGiven(given[:1], effects[1:], nil, nil); len(v) != 1 {
		t.Errorf("a result that is no effect: %v", v)
	}
	// An execution that overlaps a replay of the result before a delete:
	// the delete fits between the replay and the execution's end.
	overlap := []Given{{Key: "k", Body: "v2", Call: 10, Return: 100}, {Key: "k", Body: "v1", Call: 40, Return: 45}}
	if v := checkGiven(overlap, effects, deletes([]Op{del}), nil); len(v) != 0 {
		t.Errorf("an execution overlapping a delete and an older replay: %v", v)
	}
}

// TestRunMemory is one short run of the memory configuration in the
// default suite (under -race there): the harness itself stays race-free,
// and a run of correct code has no violation.
func TestRunMemory(t *testing.T) {
	w := work
	w.Duration = time.Second
	env := memoryEnv(t)
	h, st, err := Run(t.Context(), env, w, 42)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ops == 0 || len(h.Effects) == 0 {
		t.Fatalf("the run did nothing: %+v, %d effects", st, len(h.Effects))
	}
	if v := Check(h, Options{Slack: int64(5 * time.Millisecond)}, 20*time.Second); v.Failed() {
		t.Fatalf("violations in a run of the memory store: %v", v.Violations)
	}
}

// TestRecheck checks a history written by a run again, with the checker
// as it is now: IDEM_CHECK_HISTORY=check-out/CONFIG-SEED/history.json
// (IDEM_CHECK_STALENESS=250ms for the near cache's configuration).
func TestRecheck(t *testing.T) {
	path := os.Getenv("IDEM_CHECK_HISTORY")
	if path == "" {
		t.Skip("IDEM_CHECK_HISTORY names a history.json to check again")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	for i, op := range h.Ops {
		// As recStore records them now: an acquire's error is an unknown
		// outcome, and an answer with the caller's own record is an
		// unknown acquire and a read.
		switch {
		case op.In.Kind == KAcquire && op.Out.Err != "":
			op.Out, op.Return = Output{Info: true}, math.MaxInt64
		case op.In.Kind == KAcquire && op.Out.Rec != nil && op.Out.Rec.Owner == op.In.Owner:
			read := op
			read.In = Input{Kind: KGet, Key: op.In.Key, Call: op.Call, Return: op.Return}
			h.Ops = append(h.Ops, read)
			op.Out, op.Return = Output{Info: true}, math.MaxInt64
		}
		op.In.Call, op.In.Return = op.Call, op.Return // Input's copies of the times are the Op's
		h.Ops[i] = op
	}
	var stale time.Duration
	if v := os.Getenv("IDEM_CHECK_STALENESS"); v != "" {
		if stale, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	v := Check(h, Options{Staleness: int64(stale), Slack: int64(5 * time.Millisecond)}, time.Minute)
	t.Logf("%s: %d ops: %s, %d violations", path, len(h.Ops), v.Linearizable, len(v.Violations))
	for _, x := range v.Violations {
		t.Error(x)
	}
}
