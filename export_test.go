package idem

// LeaseOwner is the owner token of l, for tests that compare it with a
// stored record's.
func LeaseOwner(l *Lease) string { return l.ref.Owner }
