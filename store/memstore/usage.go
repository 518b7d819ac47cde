package memstore

// Usage returns the bytes the live records take, as Options.MaxBytes
// counts them, and that bound. Records whose life ended are dropped first,
// so used is the room a new key competes for. Used may exceed limit: a key
// already admitted completes past the bound (see Store.Complete).
func (s *Store) Usage() (used, limit int64) {
	s.lock()
	defer s.mu.Unlock()
	return s.bytes, s.maxBytes
}
