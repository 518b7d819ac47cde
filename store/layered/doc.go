// Package layered is an store.Store with Redis in front of PostgreSQL (or
// any other durable store.Store): Redis answers replays and conflicts fast,
// PostgreSQL is the authority.
//
// Only the authority grants leases and mints fences: Acquire asks Redis
// first, and when Redis has a live record (COMPLETED: a replay; PROCESSING:
// a conflict) it answers from it without touching the database. Otherwise
// it acquires in the authority, and mirrors the authority's answer into
// Redis. Complete, Extend and Release go to the authority first and are
// mirrored after it accepted them; Delete removes both.
//
// Redis holds copies only. If it forgets a key (a flush, an eviction, a
// failover that lost writes), the next read falls through to the
// authority, which answers correctly and re-warms the mirror; no lease is
// ever granted on Redis's word, so Redis losing data never runs a key
// twice. A mirror that missed an update (Redis was unreachable when the
// authority changed) can only answer "in flight" or replay for longer than
// it should, never grant a lease: it expires with the lease or retention it
// copied. A mirror write never rolls a newer mirror back (see put.lua).
//
// The mirror of a key is one Redis hash, PREFIX{len(tenant):tenant:key},
// so the store works on Redis Cluster too.
//
// Nothing of the layered store needs reaping: every mirror and tombstone
// carries a Redis TTL, and the authority deletes its own expired rows
// (store/pgstore's reaper, stopped by its Close). Unlike store/redisstore,
// whose unsettled records have no TTL, the mirror keeps its TTLs: it
// copies a PROCESSING record for the rest of its lease only and never an
// UNKNOWN one, so what keeps an unsettled key until it is settled is the
// authority's record; a mirror kept past its lease would answer "in
// flight" for a key the authority reports abandoned.
package layered
