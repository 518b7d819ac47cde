package layered

import "github.com/idemkit/idem/store"

// MirrorKey returns the Redis key of the mirror of id, for the tests that
// look at the mirror directly.
func (s *Store) MirrorKey(id store.ID) string { return s.mirrorKey(id) }
