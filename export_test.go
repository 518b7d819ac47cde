package idem

import "context"

// LeaseOwner is the owner token of l, for tests that compare it with a
// stored record's.
func LeaseOwner(l *Lease) string { return l.ref.Owner }

// FlushHeld stores what e holds without shutting it down, for tests that
// go on using the engine afterwards.
func FlushHeld(e *Engine, ctx context.Context) error { return e.flushHeld(ctx) }
