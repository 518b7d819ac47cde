package memstore

// Usage returns the bytes the live records take, as Options.MaxBytes
// counts them, and that bound: each tenant's records count up to its
// share (Options.TenantShare), so used is the room a new key competes for,
// and at limit every tenant's new keys are refused. Records whose life
// ended are dropped first. Used may exceed limit: a key already admitted
// completes past the bound (see Store.Complete).
func (s *Store) Usage() (used, limit int64) {
	if s.made() != nil {
		return 0, 0
	}
	s.lock()
	defer s.mu.Unlock()
	return s.counted, s.maxBytes
}
