package check

import (
	"cmp"
	"fmt"
	"slices"
)

// Violation is one breach the checker found.
type Violation struct {
	Kind   string // "linearizability", "double-effect", "fence", "replay"
	Key    string
	Detail string
}

func (v Violation) String() string { return v.Kind + " " + v.Key + ": " + v.Detail }

// deletes returns, per key, the admin deletes that may have taken effect
// (every outcome but a refusal before the call ran).
func deletes(ops []Op) map[string][]Op {
	out := map[string][]Op{}
	for _, op := range ops {
		if op.In.Kind == KDelete && !op.Out.Fail {
			out[op.In.Key] = append(out[op.In.Key], op)
		}
	}
	return out
}

// deletedBetween reports whether one of dels may have run after a time
// `after` and before a time `before`.
func deletedBetween(dels []Op, after, before int64) bool {
	for _, d := range dels {
		if d.Call < before && d.Return > after {
			return true
		}
	}
	return false
}

// checkEffects: the side effect ran at most once per key, unless an
// operator deleted the key after the first effect's request began (the
// delete may have ended its attempt's lease) and before the second effect.
// A release, a resolution as not executed, an expiry: none of them may
// come after an effect and let it run again; but for a key with a life
// (History.Life), an effect whose request began that long before, once a
// client was given its result: its record was COMPLETED and expired, and
// the key may run again. An effect whose result no client got may have
// left its key UNKNOWN (a 504, a cut), which is kept until settled, never
// forgotten by time.
func checkEffects(effects []Effect, given []Given, dels map[string][]Op, life map[string]int64) []Violation {
	var out []Violation
	gotten := map[[2]string]bool{} // key and value of each result given
	for _, g := range given {
		gotten[[2]string{g.Key, g.Body}] = true
	}
	last := map[string]Effect{}
	for _, e := range effects {
		prev, seen := last[e.Key]
		last[e.Key] = e
		expired := life[e.Key] > 0 && e.At >= prev.Began+life[e.Key] && gotten[[2]string{e.Key, prev.Value}]
		if seen && !expired && !deletedBetween(dels[e.Key], prev.Began, e.At) {
			out = append(out, Violation{"double-effect", e.Key, fmt.Sprintf(
				"effect of fence %d at %v after the effect of fence %d at %v, and no delete between", e.Fence, ms(e.At), prev.Fence, ms(prev.At))})
		}
	}
	return out
}

// checkFences: the fences the store minted for a key are distinct, and an
// acquisition that began after another returned has a higher fence.
func checkFences(ops []Op) []Violation {
	byKey := map[string][]Op{}
	for _, op := range ops {
		if op.In.Kind == KAcquire && op.Out.Acquired {
			byKey[op.In.Key] = append(byKey[op.In.Key], op)
		}
	}
	var out []Violation
	for key, acq := range byKey {
		slices.SortFunc(acq, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
		for i, a := range acq {
			for _, b := range acq[i+1:] {
				switch {
				case a.Out.Fence == b.Out.Fence:
					out = append(out, Violation{"fence", key, fmt.Sprintf("fence %d minted twice (acquires at %v and %v)", a.Out.Fence, ms(a.Call), ms(b.Call))})
				case a.Return < b.Call && a.Out.Fence > b.Out.Fence:
					out = append(out, Violation{"fence", key, fmt.Sprintf("fence %d (acquire at %v) after fence %d (acquire that returned at %v)", b.Out.Fence, ms(b.Call), a.Out.Fence, ms(a.Return))})
				}
			}
		}
	}
	return out
}

// checkGiven: every result handed to a client for a key is the value of
// one of the key's effects, and all of them are the same bytes, unless an
// operator deleted the key between two of them. For a key with a life
// (History.Life), a later result may be of a later effect (the key ran
// again once its record expired, which checkEffects holds to its life),
// never of an earlier one.
func checkGiven(given []Given, effects []Effect, dels map[string][]Op, life map[string]int64) []Violation {
	values := map[string]map[string]bool{}
	order := map[string]int{} // effect value → its place in the run
	for i, e := range effects {
		if values[e.Key] == nil {
			values[e.Key] = map[string]bool{}
		}
		values[e.Key][e.Value] = true
		order[e.Value] = i
	}
	byKey := map[string][]Given{}
	var out []Violation
	for _, g := range given {
		if !values[g.Key][g.Body] {
			out = append(out, Violation{"replay", g.Key, fmt.Sprintf("result %q (replay %t, at %v) is no effect of the key", short(g.Body), g.Replay, ms(g.Call))})
		}
		byKey[g.Key] = append(byKey[g.Key], g)
	}
	for key, gs := range byKey {
		slices.SortFunc(gs, func(a, b Given) int { return cmp.Compare(a.Call, b.Call) })
		for i, a := range gs {
			for _, b := range gs[i+1:] {
				same := a.Body == b.Body && (a.Full == "" || b.Full == "" || a.Full == b.Full)
				if life[key] > 0 && a.Return < b.Call && order[b.Body] > order[a.Body] {
					same = true // the key ran again after its record expired
				}
				// Either may have come first when they overlap: a delete
				// excuses them if it fits between them in one order or the other.
				if !same && !deletedBetween(dels[key], a.Call, b.Return) && !deletedBetween(dels[key], b.Call, a.Return) {
					out = append(out, Violation{"replay", key, fmt.Sprintf("%q (at %v, replay %t) then %q (at %v, replay %t), no delete between",
						a.Full+a.Body, ms(a.Call), a.Replay, b.Full+b.Body, ms(b.Call), b.Replay)})
					break
				}
			}
		}
	}
	return out
}

// ms formats a recorder time for a message.
func ms(t int64) string { return fmt.Sprintf("%.1fms", float64(t)/1e6) }
