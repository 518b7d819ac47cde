package check

import (
	"fmt"
	"hash/fnv"
)

// What the visualization and porcupine's state cache need of the model:
// a state's hash, and a line for each operation and state.

func encodeView(w View) string {
	return fmt.Sprintf("%c|%s|%d|%s|%s|%s", w.State, w.Owner, w.Fence, w.FP, w.Result, w.Reason)
}

func hashState(s any) uint64 {
	v := s.(state)
	h := fnv.New64a()
	fmt.Fprintf(h, "%c%s%s%d%d%t%s%s%s%d%d%s%d", v.St, v.Owner, v.FP, v.Fence, v.Last, v.Ended, v.Result, v.Reason,
		v.Claim, v.LeaseMin, v.ClaimMin, v.Stale, v.StaleUntil)
	return h.Sum64()
}

func describeState(v state) string {
	switch v.St {
	case 'A':
		return fmt.Sprintf("ABSENT (last fence %d)", v.Last)
	case 'P':
		s := fmt.Sprintf("PROCESSING(%s, f%d)", short(v.Owner), v.Fence)
		if v.Ended {
			s += " lease ended"
		}
		return s
	case 'C':
		return fmt.Sprintf("COMPLETED(f%d, %s)", v.Fence, short(v.Result))
	}
	return fmt.Sprintf("UNKNOWN(f%d, %s, claim %s)", v.Fence, v.Reason, short(v.Claim))
}

func describeOp(in Input, out Output) string {
	s := in.Kind.String() + "("
	switch in.Kind {
	case KAcquire:
		s += short(in.Owner)
		if in.TakeOver {
			s += " takeover"
		}
	case KComplete, KExtend, KRelease, KMarkUnknown:
		s += fmt.Sprintf("%s f%d", short(in.Owner), in.Fence)
	case KClaim:
		s += short(in.Owner)
	case KResolve:
		s += fmt.Sprintf("f%d", in.Fence)
		if in.HasResult {
			s += " " + short(in.Result)
		} else {
			s += " not executed"
		}
	}
	s += ") -> "
	switch {
	case out.Info:
		return s + "info: " + out.Detail
	case out.Fail:
		return s + "fail: " + out.Detail
	case out.Err != "":
		return s + out.Err
	case out.Acquired:
		if out.Took != 0 {
			return s + fmt.Sprintf("acquired f%d (took f%d)", out.Fence, out.Took)
		}
		return s + fmt.Sprintf("acquired f%d", out.Fence)
	case out.Rec != nil && in.Kind == KClaim:
		return s + fmt.Sprintf("claimed=%t %s", out.Claimed, out.Rec)
	case out.Rec != nil:
		return s + out.Rec.String()
	case in.Kind == KDelete:
		return s + fmt.Sprintf("existed=%t", out.Existed)
	}
	return s + "ok"
}
