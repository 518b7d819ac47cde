package redisstore

import "github.com/idemkit/idem"

// RecordKey returns the Redis key of the record of id, for the tests that
// reach the record or its Cluster slot directly.
func (s *Store) RecordKey(id idem.ID) string { return s.recordKey(id) }

// AcquireSource and CompleteSource are the acquire and complete scripts as
// EVALSHA runs them, for the benchmark that measures FCALL against EVALSHA.
var AcquireSource, CompleteSource = acquireScript.src, completeScript.src

// FunctionLibrary returns acquire.lua and complete.lua as a Redis 7
// function library named name, registering name_acquire and
// name_complete (FCALL), for the same benchmark.
func FunctionLibrary(name string) string {
	fn := func(fname, body string) string {
		return "redis.register_function('" + name + "_" + fname + "', function(KEYS, ARGV)\n" + body + "\nend)\n"
	}
	return "#!lua name=" + name + "\n" + recordLua + fn("acquire", acquireLua) + fn("complete", completeLua)
}

// FenceGraceMs is how long a key outlives its record, as the store passes it.
const FenceGraceMs = fenceGraceMs
