package redisstore

import "github.com/idemkit/idem/store"

// RecordKey returns the Redis key of the record of id, for the tests that
// reach the record or its Cluster slot directly.
func (s *Store) RecordKey(id store.ID) string { return s.recordKey(id) }

// FunctionLibrary is the name of the function library of Options.Functions.
var FunctionLibrary = libraryFunctions.lib

// ParseAcquired decodes acquire.lua's reply to an acquisition.
var ParseAcquired = parseAcquired

// CoalesceQueued returns how many operations wait for the next batch of
// Options.Coalesce.
func (s *Store) CoalesceQueued() int {
	s.co.mu.Lock()
	defer s.co.mu.Unlock()
	return len(s.co.queue)
}

// BatchSHA is the SHA1 of the batch script, as EVALSHA names it.
var BatchSHA = batchScript.goredis.Hash()

// BatchSource is the batch script as EVALSHA runs it.
var BatchSource = batchScript.src

// CoalesceInFlight is how many script calls of a coalescing store may be
// in flight before operations queue.
const CoalesceInFlight = coalesceInFlight

// CoalesceSending returns how many script calls of s are in flight.
func (s *Store) CoalesceSending() int {
	s.co.mu.Lock()
	defer s.co.mu.Unlock()
	return s.co.inFlight
}

// DeleteSHA is the SHA1 of the delete script, as EVALSHA names it.
var DeleteSHA = deleteScript.goredis.Hash()

// IndexKeyOf returns the key of the index of unsettled records that holds
// the record of id.
func (s *Store) IndexKeyOf(id store.ID) string { return s.index.keyOf(s.recordKey(id)) }
