// Package redisstore is an idem.Store on Redis: every state transition is
// one atomic Lua script that checks the owner and the fence of the lease.
//
// Each idempotency key is one Redis string, under the hash tag
// {len(tenant):tenant:key}, so the store works on a single node, a
// Sentinel-managed primary and Redis Cluster alike:
//
//	PREFIX{5:acme:order-42}    state (P, C, or X: a tombstone), the end of
//	                           the lease or retention, fence, owner,
//	                           fingerprint, acquired ms; when C also
//	                           completed ms, status, header
//	                           (recordcodec.AppendHeader) and body
//
// The encoding (struct.pack in the scripts, described in record.lua) is
// read and written whole: one GET and one SET per transition, which costs
// Redis less than a hash and a separate fence counter would.
//
// It needs Redis 7.0 or later (acquire uses SET NX GET).
//
// Times run on the Redis server's clock, in milliseconds, so the
// application servers' clocks play no part. A record ends when its lease
// (PROCESSING) or retention (COMPLETED) does, checked by the scripts; the
// key itself lives an hour longer (its Redis TTL), so that the fence of an
// ended, released or deleted record is still there for the next
// acquisition. That hour also keeps a completed body in memory past its
// retention (4% more for the default 24 h).
//
// # What a failover can do
//
// Redis replicates asynchronously. If the primary fails after an acquire
// was acknowledged but before a replica received it, the promoted replica
// has no record: a retry acquires the key again and the work can run twice.
// The last fence can roll back in the same way, which is why a fence is
// never below the server's clock in microseconds: it still increases unless
// the new primary's clock is behind the old one's. A clock jump on the Redis
// host moves every TTL with it, and can end all leases at once. Redis is the
// fast first filter; for work that must never run twice, put a store that
// does not lose acknowledged writes behind it (store/pgstore, store/layered)
// and fence the work's own writes.
//
// # Replica acknowledgement
//
// Options.ReplicaAcks narrows that window: after an acquire and after a
// complete the store sends WAIT on the connection that ran the script (a
// pipeline to the primary that owns the key's slot) and fails closed, with
// ErrNotReplicated, when fewer replicas acknowledge in time; a failed
// acquire releases its record, so the work never starts on a lease that
// only the primary knows. It does not make Redis durable: WAIT counts
// replicas that received the write, not ones that persisted it; a failover
// may still promote a replica that missed it (a Sentinel or cluster
// failover picks the most up-to-date replica it can see, not necessarily
// one that acknowledged); and extends and releases are not waited for.
// Pair it with min-replicas-to-write on the primary, which bounds how long
// a primary cut off from its replicas keeps accepting writes.
// docs/deployment.md has the measured effect.
//
// # Store URLs
//
// ParseURL turns one string into a go-redis client for a single server,
// a Sentinel-managed primary or a Redis Cluster.
//
// # Clients
//
// New takes a go-redis client, NewRueidis a rueidis one; both run the same
// scripts. Under concurrency rueidis is the faster (it pipelines the calls
// of many goroutines on one connection): see docs/benchmarks.md.
package redisstore
