// Package outcome holds the marks a work's error carries about its
// effect, which idem.OutcomeUnknown and idem.NotRun put on it and which
// Engine.Do and idemgrpc read: one type each, so the two read them alike.
package outcome

import (
	"errors"

	"github.com/idemkit/idem/store"
)

// Unknown marks an error after which the work's effect may have happened.
// Reason is what the application chose to record with the key (and show
// to the callers that retry it); empty when it chose none.
type Unknown struct {
	Err    error
	Reason string
}

func (u *Unknown) Error() string   { return "outcome unknown: " + u.Err.Error() }
func (u *Unknown) Unwrap() []error { return []error{store.ErrOutcomeUnknown, u.Err} }

// NotRun marks an error that came before the work's effect: the work
// provably did not take effect.
type NotRun struct{ Err error }

func (n *NotRun) Error() string { return n.Err.Error() }
func (n *NotRun) Unwrap() error { return n.Err }

// Released is the error of an Engine.Do that released its key because
// its work's error was marked NotRun. The mark spoke for that work alone
// and ends here: an enclosing work (a Do, or a handler behind idemgrpc)
// that returns this error may have had effects before it, so IsNotRun
// does not look inside. errors.Is and errors.As still find Err.
type Released struct{ Err error }

func (r *Released) Error() string { return r.Err.Error() }
func (r *Released) Unwrap() error { return r.Err }

// ChosenReason returns the reason the application gave with
// idem.OutcomeUnknown, if err carries one.
func ChosenReason(err error) (string, bool) {
	if u, ok := errors.AsType[*Unknown](err); ok && u.Reason != "" {
		return u.Reason, true
	}
	return "", false
}

// IsNotRun reports whether err was marked with idem.NotRun: err is, or
// wraps, a *NotRun, and where err joins several errors (errors.Join, an
// fmt.Errorf with several %w) each of them is marked. One unmarked error
// among them may have come after an effect: the safe reading wins. A mark
// inside a *Released (the error of a Do that released its own key) is
// not read: it spoke for that Do's work, not for the one returning it.
func IsNotRun(err error) bool {
	for {
		switch e := err.(type) {
		case nil, *Released:
			return false
		case *NotRun:
			return true
		case interface{ Unwrap() []error }:
			errs := e.Unwrap()
			for _, x := range errs {
				if !IsNotRun(x) {
					return false
				}
			}
			return len(errs) > 0
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		default:
			return false
		}
	}
}
