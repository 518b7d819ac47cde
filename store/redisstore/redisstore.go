package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/redisrecord"
	"github.com/idemkit/idem/store"
)

// fenceGraceMs is how much longer a key lives than its record, keeping the
// record's fence for the next acquisition.
const fenceGraceMs = int64(time.Hour / time.Millisecond)

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// Prefix starts every Redis key the store writes. Zero means "idem:".
	// It may not hold '{' or '}', which would break the hash tag.
	Prefix string
	// ReplicaAcks is how many replicas must acknowledge every write
	// (acquire, complete, extend, release, mark unknown, resolve, delete;
	// not a reconciliation claim) (Redis WAIT, on the connection that ran
	// the script) before the store reports success, and how many a Get
	// must still see connected (so that it never answers from a node that
	// is no longer the primary). Zero means no waiting.
	// When too few acknowledge in time the call fails with an error
	// wrapping ErrNotReplicated; a failed acquire releases the record it
	// wrote. It needs a *redis.Client, a Sentinel failover client or a
	// *redis.ClusterClient. What it narrows, and what it does not, is in
	// the package documentation and docs/stores.md.
	ReplicaAcks int
	// ReplicaAckTimeout bounds the wait for ReplicaAcks. Zero means 500ms.
	// It must be below the client's read timeout.
	ReplicaAckTimeout time.Duration
	// NearCache serves the replays of COMPLETED records from process
	// memory, kept correct by Redis's server-assisted client-side caching
	// (RESP3 CLIENT TRACKING): a replay costs no round trip after the
	// first, and a delete or a resolve through any client reaches the
	// cache as an invalidation. It needs a rueidis client (NewRueidis)
	// with client-side caching enabled (rueidis's default; its memory is
	// bounded by rueidis.ClientOption.CacheSizeEachConn). False (the zero
	// value) means off. docs/redis-internals.md has what it guarantees.
	NearCache bool
	// Functions runs the scripts as a Redis 7 function library (FCALL)
	// instead of EVALSHA, which measured 2-21% (median 9%) faster per
	// acquire+complete cycle (docs/benchmarks.md). The store loads the library, named
	// idem_ and a hash of its code, on every node the first time a call
	// finds it missing; it stays in Redis (functions are data: replicated,
	// persisted, kept by FLUSHALL) until FUNCTION DELETE. The client's
	// user needs the FUNCTION LOAD permission. It needs a rueidis client
	// (NewRueidis). False (the zero value) means EVALSHA.
	Functions bool
	// Coalesce sends the single-key operations (Acquire, Complete, Extend,
	// Release, MarkUnknown, Claim, Resolve, Get, Delete) that come while
	// two script calls of this store are in flight as one batch script,
	// when one of them returns (group commit): under concurrency one round
	// trip and one script call carry up to 64 operations, each answered
	// exactly as its own script would have answered it, all at one server
	// time (the batch reads the clock once). A call that comes while fewer
	// are in flight goes out at once by its own script: there is no timer
	// and no wait when the load is light. A caller whose context
	// ends while its operation is queued gets the context's error and the
	// operation never runs; once its batch is sent, it is as a script
	// whose reply was lost (it may have run). docs/state-machine.md has
	// the argument, docs/benchmarks.md the measured effect.
	// Store.CoalesceStats counts the batches.
	// It applies on a single Redis server or a Sentinel-managed primary;
	// on Redis Cluster and a go-redis Ring it is ignored (a script's keys
	// must share one slot), and every operation runs its own script. It
	// cannot be combined with ReplicaAcks. False (the zero value) means
	// off.
	Coalesce bool
	// AllowEviction, unsafe, lets the store work on a Redis that may
	// evict its records. Without it the store's first call (and every
	// call until one passes) runs CheckEviction and fails with an error
	// wrapping ErrMayEvict when a master's maxmemory-policy is not
	// noeviction, whatever its maxmemory (volatile-lru, the default of
	// many managed services, takes results and tombstones: they have a TTL), or
	// when the server refuses INFO. A record evicted is a key forgotten:
	// its work runs again. Set it only where that is accepted, or where
	// the policy is known to be noeviction but cannot be read. False (the
	// zero value) means the check runs. A store URL sets it with
	// allow_eviction=on.
	AllowEviction bool
}

// errNotMade is returned by every method of a Store that New did not make
// (a zero Store, or a nil *Store), instead of panicking on what New sets
// up.
var errNotMade = errors.New("redisstore: Store not made with New, NewRueidis or OpenURL: a zero or nil *Store has no Redis client")

// made returns errNotMade for a Store that New did not make.
func (s *Store) made() error {
	if s == nil || s.r == nil {
		return errNotMade
	}
	return nil
}

// Store is an store.Store on Redis. It is safe for concurrent use.
type Store struct {
	r      runner
	prefix string
	index  index

	acks       ackRunner // nil when ReplicaAcks is zero
	replicas   int
	ackTimeout time.Duration

	near *nearCache // nil when Options.NearCache is off
	co   *coalescer // nil when Options.Coalesce is off or ignored

	// The last lease, retention and nominal life of a record whose
	// outcome may be unknown (the longer of the retention and the key
	// retention; it ends nothing, see record.lua), as script arguments.
	leaseMs, retentionMs, keepMs msArg

	closeClient func() // the client OpenURL opened for the store; nil when the caller gave it

	info infoReader // reads the masters' INFO, for CheckEviction; nil when the client cannot
	// checked is set once CheckEviction passed (or at New with
	// Options.AllowEviction); checking lets one caller run it at a time.
	checked  atomic.Bool
	checking chan struct{}
}

// Close closes the client the store opened itself (OpenURL); a client
// given to New or NewRueidis stays the caller's to close. Every store of
// this module has a Close that releases what the store opened, and only
// that.
func (s *Store) Close() error {
	if err := s.made(); err != nil {
		return err
	}
	if s.closeClient != nil {
		s.closeClient()
	}
	return nil
}

// msArg turns a duration into a script argument (its milliseconds in an
// interface), keeping the last one made: the engine passes the same lease
// and retention on every call, and boxing an int64 allocates.
type msArg struct{ last atomic.Pointer[boxedMs] }

type boxedMs struct {
	d   time.Duration
	arg any
}

func (m *msArg) arg(d time.Duration) any {
	if b := m.last.Load(); b != nil && b.d == d {
		return b.arg
	}
	b := &boxedMs{d: d, arg: d.Milliseconds()}
	m.last.Store(b)
	return b.arg
}

func newStore(r batchRunner, mode indexMode, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	prefix, err := redisrecord.Prefix(o.Prefix, "idem:")
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	o.Prefix = prefix
	if o.ReplicaAcks < 0 || o.ReplicaAckTimeout < 0 {
		return nil, fmt.Errorf("redisstore: ReplicaAcks %d and ReplicaAckTimeout %v may not be negative", o.ReplicaAcks, o.ReplicaAckTimeout)
	}
	if o.ReplicaAckTimeout == 0 {
		o.ReplicaAckTimeout = defaultReplicaAckTimeout
	}
	if o.Coalesce && o.ReplicaAcks > 0 {
		return nil, errCoalesceReplicaAcks
	}
	s := &Store{r: r, prefix: o.Prefix, index: newIndex(o.Prefix, mode),
		replicas: o.ReplicaAcks, ackTimeout: o.ReplicaAckTimeout, checking: make(chan struct{}, 1)}
	s.checked.Store(o.AllowEviction)
	if o.Coalesce && mode == indexSingle { // one node: every key in one batch is fine
		s.co = newCoalescer(r)
		s.r = s.co
	}
	return s, nil
}

// recordKey returns the Redis key of the record of id.
func (s *Store) recordKey(id store.ID) string {
	return redisrecord.Key(s.prefix, id)
}

func (s *Store) keys(id store.ID) []string { return []string{s.recordKey(id)} }

// tombstoneSuffix names a record's tombstone (record.lua): the record's
// key and this, in the same Cluster slot.
const tombstoneSuffix = "~e"

// tombstonedKeys returns the keys of the scripts that read or write a
// record's tombstone: indexedKeys and the tombstone's.
func (s *Store) tombstonedKeys(id store.ID) []string {
	k, tomb := s.keyAndTombstone(id)
	return []string{k, s.index.keyOf(k), tomb}
}

// keyAndTombstone returns the keys of id's record and tombstone, the one a
// prefix of the other: one allocation, not two.
func (s *Store) keyAndTombstone(id store.ID) (record, tombstone string) {
	tombstone = redisrecord.SuffixedKey(s.prefix, id, tombstoneSuffix)
	return tombstone[:len(tombstone)-len(tombstoneSuffix)], tombstone
}

// indexedKeys returns the keys of the scripts that may change the index:
// the record's, then its index's (in the record's Cluster slot).
func (s *Store) indexedKeys(id store.ID) []string {
	k := s.recordKey(id)
	return []string{k, s.index.keyOf(k)}
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Acquire implements store.Store.
func (s *Store) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	if err := s.ready(ctx); err != nil {
		return store.AcquireResult{}, err
	}
	var mark uint64
	if s.near != nil {
		// A COMPLETED record is the answer to every acquire until it ends
		// or is deleted: acquire.lua would return it unchanged.
		if rec, ok := s.near.completed(ctx, p.ID, s.recordKey(p.ID)); ok {
			return store.AcquireResult{Record: rec}, nil
		}
		mark = s.near.mark()
	}
	r, notReplicated, err := s.acked(ctx, acquireScript, s.tombstonedKeys(p.ID), []any{p.Owner, p.Fingerprint,
		s.leaseMs.arg(p.LeaseDuration), s.keepMs.arg(max(p.Retention, p.KeyRetention)), fenceGraceMs, boolArg(p.TakeOver), p.Label})
	if err != nil {
		return store.AcquireResult{}, fmt.Errorf("redisstore: acquire: %w", err)
	}
	if r.kind == replyStr { // acquired: "fence:acquired_ms[:previous_fence:previous_acquired_ms]"
		fence, at, took, err := parseAcquired(r.str)
		if err != nil {
			return store.AcquireResult{}, fmt.Errorf("redisstore: acquire: %w", err)
		}
		if notReplicated != nil && took != nil {
			// Releasing would forget the attempt taken over, whose work may
			// have run: leave the record to end with its lease, after which
			// the next acquisition finds it abandoned again.
			return store.AcquireResult{}, fmt.Errorf("redisstore: acquire: %w (takeover kept until its lease ends)", notReplicated)
		}
		if notReplicated != nil {
			return store.AcquireResult{}, s.releaseUnreplicated(ctx, store.LeaseRef{ID: p.ID, Owner: p.Owner, Fence: fence}, notReplicated)
		}
		return store.AcquireResult{Acquired: true, Takeover: took, Record: store.Record{ID: p.ID, State: store.StateProcessing,
			Owner: p.Owner, Fence: fence, Fingerprint: p.Fingerprint, AcquiredAt: time.UnixMilli(at), TTL: p.LeaseDuration, Label: p.Label}}, nil
	}
	rec, _, err := parseRecord(p.ID, r)
	if err != nil {
		return store.AcquireResult{}, fmt.Errorf("redisstore: acquire: %w", err)
	}
	if notReplicated != nil && rec.State == store.StateProcessing && rec.Owner == p.Owner {
		// The caller's own earlier try (whose reply was lost) acquired the
		// key, and the engine would take this record as its lease: it must
		// be replicated like a fresh acquisition, or released.
		return store.AcquireResult{}, s.releaseUnreplicated(ctx, store.LeaseRef{ID: p.ID, Owner: p.Owner, Fence: rec.Fence}, notReplicated)
	}
	if notReplicated != nil { // the record of a node that may be a stale primary (see transition)
		return store.AcquireResult{}, fmt.Errorf("redisstore: acquire: %w", notReplicated)
	}
	s.sawRecord(rec, mark)
	return store.AcquireResult{Record: rec}, nil
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	var mark uint64
	if s.near != nil {
		mark = s.near.mark()
	}
	err := s.transition(ctx, "complete", s.acked, completeScript, s.tombstonedKeys(p.ID), []any{p.Owner, p.Fence,
		s.retentionMs.arg(p.Retention), p.Result.Status, encodeHeader(p.Result.Header), p.Result.Body, fenceGraceMs,
		p.KeyRetention.Milliseconds()})
	if err == nil && s.near != nil {
		s.near.saw(s.recordKey(p.ID), p.Fence, mark)
	}
	return err
}

// Extend implements store.Store.
func (s *Store) Extend(ctx context.Context, p store.ExtendParams) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return s.transition(ctx, "extend", s.acked, extendScript, s.keys(p.ID),
		[]any{p.Owner, p.Fence, s.leaseMs.arg(p.LeaseDuration), s.keepMs.arg(max(p.Retention, p.KeyRetention)), fenceGraceMs})
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, p store.LeaseRef) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return s.transition(ctx, "release", s.acked, releaseScript, s.indexedKeys(p.ID), []any{p.Owner, p.Fence, fenceGraceMs})
}

// MarkUnknown implements store.Store. With Options.ReplicaAcks it waits
// for the replicas like Acquire and Complete.
func (s *Store) MarkUnknown(ctx context.Context, p store.MarkUnknownParams) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return s.transition(ctx, "mark unknown", s.acked, markUnknownScript, s.indexedKeys(p.ID),
		[]any{p.Owner, p.Fence, p.Reason, max(p.Retention, p.KeyRetention).Milliseconds(), fenceGraceMs})
}

// transition runs a script that answers 1 when the caller's lease allowed
// the transition and 0 when the lease is lost.
func (s *Store) transition(ctx context.Context, op string, run runFunc, sc *script, keys []string, args []any) error {
	r, notReplicated, err := run(ctx, sc, keys, args)
	switch {
	case err != nil:
		return fmt.Errorf("redisstore: %s: %w", op, err)
	case notReplicated != nil:
		// A refusal too: a node whose replicas do not answer may be a
		// stale primary (an old one restarted empty after a failover),
		// whose word on the lease is not the store's.
		return fmt.Errorf("redisstore: %s: %w", op, notReplicated)
	case r.kind == replyInt && r.num == 1:
		return nil
	case r.kind == replyInt && r.num == 0:
		return store.ErrLeaseLost
	}
	return fmt.Errorf("redisstore: %s: bad reply %+v", op, r)
}

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if err := s.ready(ctx); err != nil {
		return store.ClaimResult{}, err
	}
	r, err := s.r.run(ctx, claimScript, s.indexedKeys(p.ID), []any{p.Owner, p.LeaseDuration.Milliseconds(), fenceGraceMs})
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	if r.kind == replyArray && len(r.fields) == 0 {
		return store.ClaimResult{}, store.ErrNotFound
	}
	rec, claimed, err := parseRecord(p.ID, r)
	if err != nil {
		return store.ClaimResult{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	return store.ClaimResult{Claimed: claimed, Record: rec}, nil
}

// Resolve implements store.Store. With Options.ReplicaAcks it waits for
// the replicas like Acquire and Complete.
func (s *Store) Resolve(ctx context.Context, p store.ResolveParams) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	args := []any{p.Fence, p.Claim, "0", p.Retention.Milliseconds(), 0, "", "", fenceGraceMs, p.KeyRetention.Milliseconds()}
	if p.Result != nil {
		args[2], args[4], args[5], args[6] = "1", p.Result.Status, encodeHeader(p.Result.Header), p.Result.Body
	}
	if s.near != nil {
		s.near.removing(s.recordKey(p.ID))
	}
	r, notReplicated, err := s.acked(ctx, resolveScript, s.tombstonedKeys(p.ID), args)
	if s.near != nil {
		s.near.removing(s.recordKey(p.ID)) // see Delete
	}
	switch {
	case err != nil:
		return fmt.Errorf("redisstore: resolve: %w", err)
	case r.kind != replyInt:
		return fmt.Errorf("redisstore: resolve: bad reply %+v", r)
	case notReplicated != nil: // a refusal too (see transition)
		return fmt.Errorf("redisstore: resolve: %w", notReplicated)
	case r.num == 1:
		return nil
	case r.num == 0:
		return store.ErrNotFound
	case r.num == -1:
		return store.ErrNotUnknown
	case r.num == -2:
		return store.ErrStaleFence
	case r.num == -3:
		return store.ErrLeaseLost
	}
	return fmt.Errorf("redisstore: resolve: bad reply %d", r.num)
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, id store.ID) (store.Record, error) {
	if err := s.ready(ctx); err != nil {
		return store.Record{}, err
	}
	var mark uint64
	if s.near != nil {
		if rec, ok := s.near.completed(ctx, id, s.recordKey(id)); ok {
			return rec, nil
		}
		mark = s.near.mark()
	}
	k, tomb := s.keyAndTombstone(id)
	// With ReplicaAcks a read is followed by WAIT too: a node that is no
	// longer the primary answers a read from a stale or empty copy (a
	// demoted primary, one restarted empty before Sentinel made it a
	// replica) where it refuses a write, and WAIT fails there (a replica
	// refuses it; a lone master has no replica to count).
	r, notReplicated, err := s.acked(ctx, getScript, []string{k, tomb}, nil)
	if err == nil {
		err = notReplicated
	}
	if err != nil {
		return store.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	if r.kind == replyArray && len(r.fields) == 0 {
		return store.Record{}, store.ErrNotFound
	}
	rec, _, err := parseRecord(id, r)
	if err != nil {
		return store.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	s.sawRecord(rec, mark)
	return rec, nil
}

// sawRecord tells the near cache, when on, of a COMPLETED record a script
// sent after mark (nearCache.mark) returned.
func (s *Store) sawRecord(rec store.Record, mark uint64) {
	if s.near != nil && rec.State == store.StateCompleted {
		s.near.saw(s.recordKey(rec.ID), rec.Fence, mark)
	}
}

// NearCacheStats returns what the near cache did (Options.NearCache), and
// false when it is off.
func (s *Store) NearCacheStats() (NearCacheStats, bool) {
	if s.made() != nil {
		return NearCacheStats{}, false
	}
	if s.near == nil {
		return NearCacheStats{}, false
	}
	return s.near.stats(), true
}

// CoalesceStats returns what Options.Coalesce did, and false when it is off
// (or ignored: Redis Cluster, a Ring).
func (s *Store) CoalesceStats() (CoalesceStats, bool) {
	if s.made() != nil {
		return CoalesceStats{}, false
	}
	if s.co == nil {
		return CoalesceStats{}, false
	}
	return s.co.stats(), true
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, p store.DeleteParams) (bool, error) {
	if err := s.ready(ctx); err != nil {
		return false, err
	}
	if s.near != nil {
		s.near.removing(s.recordKey(p.ID))
	}
	r, notReplicated, err := s.acked(ctx, deleteScript, s.tombstonedKeys(p.ID), []any{fenceGraceMs, p.Fence})
	if s.near != nil {
		// Again after the script: an acquire that ran meanwhile may have
		// seen the record, and this process's cached copy is dropped only
		// when its invalidation is read, which may come after this reply
		// (on another of the client's connections, or later on this one).
		// From here on saw ignores the replies to scripts sent before.
		s.near.removing(s.recordKey(p.ID))
	}
	switch {
	case err != nil:
		return false, fmt.Errorf("redisstore: delete: %w", err)
	case r.kind != replyInt:
		return false, fmt.Errorf("redisstore: delete: bad reply %+v", r)
	case notReplicated != nil:
		return r.num == 1, fmt.Errorf("redisstore: delete: %w", notReplicated)
	}
	return r.num == 1, nil
}

var _ store.Store = (*Store)(nil)
