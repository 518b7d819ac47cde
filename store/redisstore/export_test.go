package redisstore

import "github.com/idemkit/idem"

// RecordKey returns the Redis key of the record of id, for the tests that
// reach the record or its Cluster slot directly.
func (s *Store) RecordKey(id idem.ID) string { return s.recordKey(id) }

// FunctionLibrary is the name of the function library of Options.Functions.
var FunctionLibrary = libraryFunctions.lib

// ParseAcquired decodes acquire.lua's reply to an acquisition.
var ParseAcquired = parseAcquired
