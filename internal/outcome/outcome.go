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

// ChosenReason returns the reason the application gave with
// idem.OutcomeUnknown, if err carries one.
func ChosenReason(err error) (string, bool) {
	if u, ok := errors.AsType[*Unknown](err); ok && u.Reason != "" {
		return u.Reason, true
	}
	return "", false
}

// IsNotRun reports whether err was marked with idem.NotRun.
func IsNotRun(err error) bool {
	_, ok := errors.AsType[*NotRun](err)
	return ok
}
