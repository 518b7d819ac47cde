package check

import (
	"math"

	"github.com/anishathalye/porcupine"
)

// state is the model of one key: the record the store holds, as
// docs/state-machine.md describes it.
type state struct {
	St     byte // 'A' absent, 'P' PROCESSING, 'C' COMPLETED, 'U' UNKNOWN
	Owner  string
	FP     string
	Fence  int64 // unknownFence: minted by an acquire whose answer was lost, not seen since
	Last   int64 // a lower bound of the highest fence minted for the key
	Ended  bool  // P: its lease ended (an operation saw it so)
	Result string
	Reason string
	Claim  string // U: the live reconciliation claim, "" when none (or it ended)
	// LeaseMin and ClaimMin are the earliest times the lease (P) or the
	// claim (U) can end: the call of the operation that granted it plus
	// its length. Zero: any time.
	LeaseMin, ClaimMin int64
	// Stale is a COMPLETED record a Delete removed, which a near cache may
	// still serve to a call made before StaleUntil (Options.Staleness).
	Stale      string
	StaleUntil int64
}

// unknownFence is the fence of a record acquired by a call whose answer
// never came: the next operation that names the record's fence binds it.
const unknownFence = -1

// anyTook stands for an acquisition whose taken-over fence was not told.
const anyTook = -2

// Options tune the model to what a configuration promises.
type Options struct {
	// Staleness is how long after a Delete returned a near cache may still
	// replay the deleted COMPLETED record (docs/redis-internals.md, "Replays
	// from a near cache"); zero: never.
	Staleness int64
	// Slack is how much earlier than call+lease a lease may end: clock
	// granularity (Redis counts whole milliseconds).
	Slack int64
}

// Model returns the porcupine model of a history of store operations,
// partitioned by key.
func Model(o Options) porcupine.Model {
	m := &model{o: o}
	nm := porcupine.NondeterministicModel{
		Partition: partitionByKey,
		Init:      func() []any { return []any{state{St: 'A'}} },
		Step: func(s, in, out any) []any {
			next := m.step(s.(state), in.(Input), out.(Output))
			res := make([]any, len(next))
			for i, n := range next {
				res[i] = n
			}
			return res
		},
		Hash:              hashState,
		DescribeOperation: func(in, out any) string { return describeOp(in.(Input), out.(Output)) },
		DescribeState:     func(s any) string { return describeState(s.(state)) },
	}
	return nm.ToModel()
}

func partitionByKey(ops []porcupine.Operation) [][]porcupine.Operation {
	idx := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range ops {
		k := op.Input.(Input).Key
		i, ok := idx[k]
		if !ok {
			i = len(parts)
			idx[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

type model struct{ o Options }

// step returns every state the key can be in after in answered out, from
// s. An Info output takes every step the call could have taken, or none.
func (m *model) step(s state, in Input, out Output) []state {
	if out.Fail {
		return []state{s}
	}
	var next []state
	for _, v := range m.variants(s, in) {
		if out.Info {
			next = append(next, v)
		}
		next = append(next, m.apply(v, in, out)...)
	}
	return next
}

// variants are the states s may be in when in runs: a lease or a claim
// may have ended meanwhile, once its earliest end has come by the time
// in returned.
func (m *model) variants(s state, in Input) []state {
	out := []state{s}
	if s.St == 'P' && !s.Ended && in.Return >= s.LeaseMin {
		e := s
		e.Ended = true
		out = append(out, e)
	}
	if s.St == 'U' && s.Claim != "" && in.Return >= s.ClaimMin {
		for _, v := range out {
			v.Claim, v.ClaimMin = "", 0
			out = append(out, v)
		}
	}
	return out
}

// earliest is when a lease or claim of length d granted by in can end.
func (m *model) earliest(in Input, d int64) int64 {
	if d <= 0 {
		return 0
	}
	return in.Call + d - m.o.Slack
}

// apply is one step from v (an Info output: any step the call could take).
func (m *model) apply(v state, in Input, out Output) []state {
	info := out.Info
	is := func(c bool) bool { return info || c }
	var res []state
	add := func(s state) { res = append(res, s) }
	switch in.Kind {
	case KAcquire:
		if out.Acquired || info {
			m.acquired(v, in, out, add)
		}
		if own := out.Rec; own != nil && own.State == 'P' && own.Owner == in.Owner && own.FP == in.FP {
			// The caller's own record: an earlier execution of this call
			// (a client that resent it after a cut connection) acquired
			// the key; the engine takes it as its lease.
			m.acquired(v, in, Output{Acquired: true, Fence: own.Fence, Took: anyTook}, add)
		}
		if !out.Acquired || info {
			m.readAcquire(v, in, out, add)
		}
	case KGet:
		if v.St == 'A' && is(out.Err == "notfound") {
			add(v)
		}
		if view, ok := v.view(); ok && out.Err == "" {
			if w, ok := matchView(v, view, out.Rec, info); ok {
				add(w)
			}
		}
		m.staleRead(v, in, out, add)
	case KComplete, KExtend, KRelease, KMarkUnknown:
		m.ownerCall(v, in, out, add)
	case KClaim:
		m.claim(v, in, out, add)
	case KResolve:
		m.resolve(v, in, out, add)
	case KDelete:
		if out.Err != "" {
			break
		}
		// A Delete with a fence removes only the record of that fence (an
		// operator's delete of what it checked); without one, any record.
		deleted := v.St != 'A' && (in.Fence == 0 || v.Fence == in.Fence)
		maybe := v.St != 'A' && in.Fence != 0 && v.Fence == unknownFence && in.Fence > v.Last
		if (deleted || maybe) && is(out.Existed) {
			w := absent(v)
			w.Last = max(w.Last, in.Fence)
			if v.St == 'C' && m.o.Staleness > 0 {
				w.Stale, w.StaleUntil = encodeView(v.mustView()), satAdd(in.Return, m.o.Staleness)
			}
			add(w)
		}
		if (!deleted || info) && is(!out.Existed) {
			add(v)
		}
	}
	return res
}

// acquired: the key was absent, or a lease that ended was taken over.
func (m *model) acquired(v state, in Input, out Output, add func(state)) {
	took := int64(0)
	switch {
	case v.St == 'A':
	case v.St == 'P' && v.Ended && in.TakeOver && v.FP == in.FP:
		took = v.Fence
	default:
		return
	}
	if !out.Info {
		if out.Took != took && out.Took != anyTook && (took != unknownFence || out.Took <= v.Last) {
			return
		}
		if out.Fence <= max(v.Last, out.Took, took) {
			return // fences strictly increase
		}
	}
	n := state{St: 'P', Owner: in.Owner, FP: in.FP, Fence: out.Fence, Last: max(v.Last, out.Fence),
		LeaseMin: m.earliest(in, in.Lease), Stale: v.Stale, StaleUntil: v.StaleUntil}
	if out.Info {
		n.Fence, n.Last = unknownFence, v.Last
	}
	add(n)
}

// readAcquire: the acquire found a record and returned it; a lease that
// ended turns UNKNOWN (abandoned) unless the call, the same request's,
// takes it over.
func (m *model) readAcquire(v state, in Input, out Output, add func(state)) {
	if out.Err != "" || v.St == 'A' || (v.St == 'P' && v.Ended && in.TakeOver && v.FP == in.FP) {
		m.staleRead(v, in, out, add)
		return
	}
	w := v
	if v.St == 'P' && v.Ended {
		w.St, w.Reason, w.Claim, w.Ended = 'U', "abandoned", "", false
	}
	if n, ok := matchView(w, w.mustView(), out.Rec, out.Info); ok {
		add(n)
	}
	m.staleRead(v, in, out, add)
}

// staleRead: a near cache answered with a deleted COMPLETED record.
func (m *model) staleRead(v state, in Input, out Output, add func(state)) {
	if v.Stale != "" && !out.Info && out.Rec != nil && in.Call <= v.StaleUntil && encodeView(*out.Rec) == v.Stale {
		add(v)
	}
}

// ownerCall: Complete, Extend, Release and MarkUnknown, which check the
// lease's owner and fence in the same step as the change.
func (m *model) ownerCall(v state, in Input, out Output, add func(state)) {
	ok := out.Info || out.Err == ""
	lost := out.Info || out.Err == "lost"
	mine, w := owned(v, in.Owner, in.Fence)
	allowed := false
	if mine {
		switch in.Kind {
		case KComplete:
			allowed = w.St == 'P' || w.St == 'U' || (w.St == 'C')
			if ok && allowed {
				n := w
				if w.St != 'C' { // a repeated Complete keeps the first result
					n = state{St: 'C', Owner: w.Owner, FP: w.FP, Fence: w.Fence, Last: w.Last, Result: in.Result,
						Stale: w.Stale, StaleUntil: w.StaleUntil}
				}
				add(n)
			}
		case KExtend:
			allowed = w.St == 'P' && !w.Ended
			if ok && allowed {
				n := w
				n.LeaseMin = max(n.LeaseMin, m.earliest(in, in.Lease))
				add(n)
			}
		case KRelease:
			allowed = w.St == 'P' || (w.St == 'U' && w.Reason == "abandoned" && w.Claim == "")
			if ok && allowed {
				add(absent(w))
			}
		case KMarkUnknown:
			allowed = w.St == 'P' || w.St == 'U'
			if ok && allowed {
				n := w
				if w.St == 'P' {
					n.St, n.Reason, n.Claim, n.Ended = 'U', in.Reason, "", false
				}
				add(n)
			}
		}
	}
	// Refused: not the caller's record, or not in a state it may change.
	if lost && (!allowed || v.Fence == unknownFence) {
		add(v)
	}
}

// owned reports whether v is the record of the lease (owner, fence),
// binding an unseen fence.
func owned(v state, owner string, fence int64) (bool, state) {
	if v.St == 'A' || v.Owner != owner {
		return false, v
	}
	if v.Fence == fence {
		return true, v
	}
	if v.Fence == unknownFence && fence > v.Last {
		v.Fence, v.Last = fence, fence
		return true, v
	}
	return false, v
}

func (m *model) claim(v state, in Input, out Output, add func(state)) {
	if v.St == 'A' {
		if out.Info || out.Err == "notfound" {
			add(v)
		}
		return
	}
	if out.Err != "" && !out.Info {
		return
	}
	w := v
	if v.St == 'P' && v.Ended {
		w.St, w.Reason, w.Claim, w.Ended = 'U', "abandoned", "", false
	}
	if w.St == 'U' && w.Claim == "" && (out.Info || out.Claimed) {
		c := w
		c.Claim, c.ClaimMin = in.Owner, m.earliest(in, in.Lease)
		if n, ok := matchView(c, w.mustView(), out.Rec, out.Info); ok {
			add(n)
		}
	}
	if (w.St != 'U' || w.Claim != "") && (out.Info || !out.Claimed) {
		if n, ok := matchView(w, w.mustView(), out.Rec, out.Info); ok {
			add(n)
		}
	}
}

func (m *model) resolve(v state, in Input, out Output, add func(state)) {
	unknown := v.St == 'U' || (v.St == 'P' && v.Ended)
	fenceMatch, fenceMismatch := false, false
	w := v
	switch {
	case v.St == 'A':
	case v.Fence == in.Fence:
		fenceMatch = true
	case v.Fence == unknownFence:
		fenceMismatch = true // the unseen fence may be another
		if in.Fence > v.Last {
			fenceMatch, w.Fence, w.Last = true, in.Fence, in.Fence
		}
	default:
		fenceMismatch = true
	}
	claimOK := in.Claim == "" || (v.St == 'U' && v.Claim == in.Claim)
	// The refusals that apply; stores check them in this order, and the
	// model accepts any of them that applies.
	refused := map[string]bool{
		"notfound":   v.St == 'A',
		"notunknown": v.St != 'A' && !unknown,
		"stale":      fenceMismatch,
		"lost":       v.St != 'A' && !claimOK,
	}
	if out.Info || refused[out.Err] {
		add(v)
	}
	if !unknown || !fenceMatch || !claimOK || !(out.Info || out.Err == "") {
		return
	}
	if !in.HasResult {
		add(absent(w))
		return
	}
	add(state{St: 'C', Owner: w.Owner, FP: w.FP, Fence: w.Fence, Last: w.Last, Result: in.Result,
		Stale: w.Stale, StaleUntil: w.StaleUntil})
}

// absent is the key after its record went: the fence counter stays.
func absent(v state) state {
	return state{St: 'A', Last: max(v.Last, v.Fence), Stale: v.Stale, StaleUntil: v.StaleUntil}
}

// view is what a read of v returns: a PROCESSING record whose lease
// ended is reported UNKNOWN (abandoned).
func (v state) view() (View, bool) {
	if v.St == 'A' {
		return View{}, false
	}
	w := View{State: v.St, Owner: v.Owner, Fence: v.Fence, FP: v.FP}
	switch {
	case v.St == 'P' && v.Ended:
		w.State, w.Reason = 'U', "abandoned"
	case v.St == 'C':
		w.Result = v.Result
	case v.St == 'U':
		w.Reason = v.Reason
	}
	return w, true
}

func (v state) mustView() View {
	w, _ := v.view()
	return w
}

// matchView compares a returned record with the expected one, binding an
// unseen fence; info (an Info output) matches without comparing.
func matchView(v state, want View, got *View, info bool) (state, bool) {
	if info {
		return v, true
	}
	if got == nil {
		return v, false
	}
	if v.Fence == unknownFence && got.Fence > v.Last {
		want.Fence = got.Fence
		v.Fence, v.Last = got.Fence, got.Fence
	}
	return v, *got == want
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
