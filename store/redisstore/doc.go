// Package redisstore is an store.Store on Redis: every state transition is
// one atomic Lua script that checks the owner and the fence of the lease.
//
// Each idempotency key is one Redis string, under the hash tag
// {len(tenant):tenant:key}, so the store works on a single node, a
// Sentinel-managed primary and Redis Cluster alike:
//
//	PREFIX{5:acme:order-42}    state (P, C, U, or X: a tombstone), the end
//	                           of the lease or retention, fence, owner,
//	                           fingerprint, acquired ms; when P also the
//	                           end of its nominal life; when C completed
//	                           ms, status, header (recordcodec.AppendHeader)
//	                           and body; when U the ms it became UNKNOWN,
//	                           the reason and the reconciliation claim
//	PREFIX{5:acme:order-42}~e  a tombstone (E), when the record completed
//	                           with a key retention: the end of the key
//	                           retention, fence, fingerprint, completed
//	                           ms, status; its own PX ends it
//	PREFIX unknown             the index of unsettled records (see below)
//
// The encoding (struct.pack in the scripts, described in record.lua) is
// read and written whole: one GET and one SET per transition, which costs
// Redis less than a hash and a separate fence counter would.
//
// # UNKNOWN records and their index
//
// An unsettled record (PROCESSING, its lease running or ended, or
// UNKNOWN) is never forgotten by time: its key has no Redis TTL, and only
// settling ends it (Complete, Release, Resolve, Delete), so an UNKNOWN key
// never runs again until it is reconciled, and an owner's late Complete
// lands however late. An ended lease is still seen: Get reports it UNKNOWN (abandoned), and the
// next Acquire turns it UNKNOWN or, with TakeOver, takes it over with a
// higher fence, in the same script. ListUnknown reads a sorted set of the
// unsettled records (PROCESSING or UNKNOWN), members
// "len(tenant):tenant:key" with score 0, paged with ZRANGEBYLEX by tenant:
// it lists the UNKNOWN ones and the PROCESSING ones whose lease ended (as
// Get reports them), so a key whose owner crashed is listed from its
// lease's end, with no retry needed. Acquire adds a record, Complete,
// Release, Resolve and Delete remove it (a ZADD and a ZREM more per
// request than an index of UNKNOWN records alone), and ListUnknown drops
// the entries of records that ended or were lost; it reads the records of the
// leases held too, and skips them. A record acquired by a version before
// this index held PROCESSING records is listed once a retry or a claim
// turns it UNKNOWN. A script may
// only touch keys of one Cluster slot, so on Redis Cluster there is one
// such index per slot (PREFIX unknown{T}, T a tag of that slot): the
// listing walks the 16384 in slot order with pipelined range reads (64
// indexes in the first round, doubling up to 4096). A go-redis Ring
// spreads the index over its shards: every other call works, ListUnknown
// does not.
//
// It needs Redis 7.0 or later (acquire uses SET NX GET).
//
// # Eviction
//
// The server must not evict the store's records: the settled ones
// (results, tombstones) have a TTL, which the volatile-* policies take as
// the allkeys-* ones take any, and a record evicted is a key forgotten:
// its retry runs the work again. Before its first call the store reads
// INFO memory (not CONFIG GET, which managed services disable) on every
// master (each of a cluster, every shard of a ring, a Sentinel set's
// master) and refuses, with an error wrapping ErrMayEvict that names the
// node and its policy, when maxmemory-policy is not noeviction (with
// maxmemory 0 too, which one CONFIG SET would change), or when the server
// refuses INFO; it asks again on
// each call until a check passes. Store.CheckEviction runs the check
// alone. Options.AllowEviction (allow_eviction=on in a store URL) turns
// it off, unsafely.
//
// Times run on the Redis server's clock, in milliseconds, so the
// application servers' clocks play no part. A COMPLETED record ends when
// its retention does, checked by the scripts; its key itself lives an
// hour longer (its Redis TTL), and so does the tombstone of a released or
// deleted record, so that the fence is still there for the next
// acquisition. That hour also keeps a completed body in memory past its
// retention (4% more for the default 24 h). A lease's end makes a
// PROCESSING record abandoned, never absent. Records written by a version
// before unsettled records lost their TTL (a finite life, PX) are read as
// never ending too; acquire, mark unknown and ListUnknown remove the TTL
// of those they meet (PERSIST), and one that nothing meets still ends
// with its old TTL: list the unknown keys once after upgrading.
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
// On Redis Cluster the store follows a shard's failover without a
// restart: after a call that failed without a reply from Redis (a refused
// dial, a broken connection, a timeout) it asks a go-redis cluster client
// to reload its slot map (ClusterClient.ReloadState), which go-redis
// otherwise does only on MOVED and once a minute; rueidis refreshes its
// map on such errors itself. docs/store-failures.md has the measured failover.
//
// # Replica acknowledgement
//
// Options.ReplicaAcks narrows that window: after every write (acquire,
// complete, extend, release, mark unknown, resolve, delete) the store sends
// WAIT on the connection that ran the script (a
// pipeline to the primary that owns the key's slot) and fails closed, with
// ErrNotReplicated, when fewer replicas acknowledge in time (a refusal
// too: a node whose replicas do not answer may be a stale primary, so its
// "lease lost" or its record is not the store's word); a failed
// acquire releases its record, so the work never starts on a lease that
// only the primary knows. A Get is followed by WAIT too, so that it never
// answers from a node that is no longer the primary (a replica refuses
// WAIT; a primary restarted empty has no replica to count). It does not make Redis durable: WAIT counts
// replicas that received the write, not ones that persisted it; a failover
// may still promote a replica that missed it (a Sentinel or cluster
// failover picks the most up-to-date replica it can see, not necessarily
// one that acknowledged). A reconciliation claim is not waited for: a
// claim lost in a failover lets a second reconciler ask, and the claim
// check of Resolve lets only the current claim's verdict land.
// Pair it with min-replicas-to-write on the primary, which bounds how long
// a primary cut off from its replicas keeps accepting writes.
// docs/deployment.md has the measured effect.
//
// # Near cache
//
// Options.NearCache (a rueidis client) serves the replays of COMPLETED
// records from process memory, kept correct by Redis's server-assisted
// client-side caching: a write to a key by any client invalidates the
// cached copy. Only keys this process saw COMPLETED are read through the
// cache, so a first request costs what it costs without it; the first
// replay reads the record in place of the acquire script, and the replays
// after it make no round trip. Store.NearCacheStats counts what it did.
//
// A Delete or Resolve through the store is seen by every request through
// it that begins after it returns. One through another client is seen
// once this client has read the invalidation Redis sends: until then a
// replay may still return the old COMPLETED record (the result the key
// had; the work does not run again). That window is how long this
// process's connection reader waits for a CPU: usually nothing (the
// invalidation arrives before the deleting client has its reply), but
// measured up to 17ms with this process nearly idle and up to 345ms with
// it CPU-bound, on a 2-core host running other loads.
// docs/redis-internals.md has the figures and the correctness argument
// (lost invalidations, reconnects, failover).
//
// # Coalesced scripts
//
// Options.Coalesce is group commit: the single-key operations that come
// while two script calls of the store are in flight queue, and the next
// call carries them all (up to 64) as one batch script, which runs each
// operation's own script code on its own keys and arguments and answers
// each separately. A lone operation goes out at once by its own script:
// there is no timer. Under concurrency one round trip and one script call
// then do the work of many. It applies on one server or a Sentinel-managed
// primary (on Redis Cluster and a Ring it is ignored); Store.CoalesceStats
// counts the batches. docs/redis-internals.md has why no key's semantics
// change and what a lost batch reply does.
//
// # Store URLs
//
// ParseURL turns one string into a go-redis client for a single server,
// a Sentinel-managed primary or a Redis Cluster. OpenURL opens a store on
// such a URL; with ?near_cache=on it uses a rueidis client and the near
// cache, with ?coalesce=on it coalesces the scripts.
//
// # Clients
//
// New takes a go-redis client, NewRueidis a rueidis one; both run the same
// scripts. Under concurrency rueidis is the faster (it pipelines the calls
// of many goroutines on one connection): see docs/benchmarks.md.
//
// A client must honour context deadlines: the engine ends a lease by its
// local clock, and a renewal stuck on a stalled server must return when
// its context does. go-redis does not by default (it waits for its read
// timeout, 3 s): set ContextTimeoutEnabled in redis.Options,
// redis.FailoverOptions or redis.ClusterOptions of a client you build
// yourself (the clients of this package's ParseURL and OpenURL have it;
// go-redis's own redis.ParseURL's do not), or New
// returns ErrNoContextTimeout. rueidis honours deadlines as it is.
package redisstore
