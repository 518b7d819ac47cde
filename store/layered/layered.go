package layered

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/redisrecord"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/recordcodec"
)

var (
	//go:embed get.lua
	getLua string
	//go:embed put.lua
	putLua string
	//go:embed complete.lua
	completeLua string
	//go:embed extend.lua
	extendLua string
	//go:embed forget.lua
	forgetLua string
	//go:embed delete.lua
	deleteLua string
	//go:embed drop.lua
	dropLua string

	getScript      = redis.NewScript(getLua)
	putScript      = redis.NewScript(putLua)
	completeScript = redis.NewScript(completeLua)
	extendScript   = redis.NewScript(extendLua)
	forgetScript   = redis.NewScript(forgetLua)
	deleteScript   = redis.NewScript(deleteLua)
	dropScript     = redis.NewScript(dropLua)
)

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// Prefix starts every Redis key of the mirror. Zero means
	// "idem:mirror:". It may not hold '{' or '}'.
	Prefix string
	// Logger receives one line per failed Redis call (the store then
	// answers from the authority). Nil means slog.Default().
	Logger *slog.Logger
}

// errNotMade is returned by every method of a Store that New did not make
// (a zero Store, or a nil *Store), instead of panicking on what New sets
// up.
var errNotMade = errors.New("layered: Store not made with New: a zero or nil *Store has no Redis client and no authority")

// made returns errNotMade for a Store that New did not make.
func (s *Store) made() error {
	if s == nil || s.redis == nil || s.authority == nil {
		return errNotMade
	}
	return nil
}

// Store is a layered store.Store. It is safe for concurrent use.
type Store struct {
	redis     redis.Scripter
	authority store.Store
	prefix    string
	log       *slog.Logger
}

// New returns a store that mirrors authority (a store that does not lose
// acknowledged writes: store/pgstore) into Redis through client.
func New(client redis.Scripter, authority store.Store, opts *Options) (*Store, error) {
	if client == nil || authority == nil {
		return nil, errors.New("layered: nil Redis client or authority")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	prefix, err := redisrecord.Prefix(o.Prefix, "idem:mirror:")
	if err != nil {
		return nil, fmt.Errorf("layered: %w", err)
	}
	o.Prefix = prefix
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Store{redis: client, authority: authority, prefix: o.Prefix, log: o.Logger}, nil
}

// Close does nothing: the Redis client and the authority were given to
// New, and stay the caller's to close (storeurl.Open's layered store
// closes both). Every store of this module has a Close that releases
// what the store opened, and only that.
func (s *Store) Close() error { return s.made() }

// mirrorKey returns the Redis key of the mirror of id.
func (s *Store) mirrorKey(id store.ID) string {
	return redisrecord.Key(s.prefix, id)
}

// Acquire implements store.Store: a live mirror answers; otherwise the
// authority decides, and its answer is mirrored.
func (s *Store) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	if err := s.made(); err != nil {
		return store.AcquireResult{}, err
	}
	if rec, ok := s.mirrored(ctx, p.ID); ok {
		return store.AcquireResult{Record: rec}, nil
	}
	res, err := s.authority.Acquire(ctx, p)
	if err != nil {
		return store.AcquireResult{}, fmt.Errorf("layered: %w", err)
	}
	s.mirror(ctx, res.Record)
	return res, nil
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) error {
	if err := s.made(); err != nil {
		return err
	}
	if err := s.authority.Complete(ctx, p); err != nil {
		return wrap(err)
	}
	err := completeScript.Run(ctx, s.redis, []string{s.mirrorKey(p.ID)}, p.Owner, p.Fence,
		max(p.Retention.Milliseconds(), 1), p.Result.Status, recordcodec.AppendHeader(nil, p.Result.Header), p.Result.Body).Err()
	s.cacheFailed("complete", err)
	return nil
}

// Extend implements store.Store.
func (s *Store) Extend(ctx context.Context, p store.ExtendParams) error {
	if err := s.made(); err != nil {
		return err
	}
	if err := s.authority.Extend(ctx, p); err != nil {
		return wrap(err)
	}
	err := extendScript.Run(ctx, s.redis, []string{s.mirrorKey(p.ID)}, p.Owner, p.Fence, max(p.LeaseDuration.Milliseconds(), 1)).Err()
	s.cacheFailed("extend", err)
	return nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, p store.LeaseRef) error {
	if err := s.made(); err != nil {
		return err
	}
	err := s.authority.Release(ctx, p)
	if err == nil || errors.Is(err, store.ErrLeaseLost) { // either way this lease is over
		s.cacheFailed("release", forgetScript.Run(ctx, s.redis, []string{s.mirrorKey(p.ID)}, p.Fence, tombstoneMs).Err())
	}
	return wrap(err)
}

// MarkUnknown implements store.Store. The mirror of the lease is replaced
// by a tombstone: UNKNOWN records are never mirrored (see mirror), so
// every retry asks the authority. If Redis misses the tombstone, the
// mirror still answers "in flight" until the lease it copied ends, and
// never runs or replays the key.
func (s *Store) MarkUnknown(ctx context.Context, p store.MarkUnknownParams) error {
	if err := s.made(); err != nil {
		return err
	}
	if err := s.authority.MarkUnknown(ctx, p); err != nil {
		return wrap(err)
	}
	s.cacheFailed("mark unknown", forgetScript.Run(ctx, s.redis, []string{s.mirrorKey(p.ID)}, p.Fence, tombstoneMs).Err())
	return nil
}

// Claim implements store.Store: claims are the authority's alone, and an
// UNKNOWN record is never in the mirror.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if err := s.made(); err != nil {
		return store.ClaimResult{}, err
	}
	res, err := s.authority.Claim(ctx, p)
	return res, wrap(err)
}

// Resolve implements store.Store. Resolved not executed, the key's mirror
// becomes a tombstone of the record's fence, so that no copy read before
// the resolution can come back; the next acquisition's higher fence is
// mirrored over it. Resolved completed, a mirrored PROCESSING copy of
// that attempt is dropped, and the next read mirrors the result. Either
// way the authority answers until then.
func (s *Store) Resolve(ctx context.Context, p store.ResolveParams) error {
	if err := s.made(); err != nil {
		return err
	}
	if err := s.authority.Resolve(ctx, p); err != nil {
		return wrap(err)
	}
	key := []string{s.mirrorKey(p.ID)}
	if p.Result == nil {
		s.cacheFailed("resolve", forgetScript.Run(ctx, s.redis, key, p.Fence, tombstoneMs).Err())
	} else {
		s.cacheFailed("resolve", dropScript.Run(ctx, s.redis, key, p.Fence).Err())
	}
	return nil
}

// ListUnknown implements store.Store: the authority keeps the index.
func (s *Store) ListUnknown(ctx context.Context, p store.ListParams) (store.ListPage, error) {
	if err := s.made(); err != nil {
		return store.ListPage{}, err
	}
	page, err := s.authority.ListUnknown(ctx, p)
	return page, wrap(err)
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, id store.ID) (store.Record, error) {
	if err := s.made(); err != nil {
		return store.Record{}, err
	}
	if rec, ok := s.mirrored(ctx, id); ok {
		return rec, nil
	}
	rec, err := s.authority.Get(ctx, id)
	if err != nil {
		return store.Record{}, wrap(err)
	}
	s.mirror(ctx, rec)
	return rec, nil
}

// Delete implements store.Store. It fails if the mirror could not be
// removed, so that an operator retries rather than leaves a replay behind.
func (s *Store) Delete(ctx context.Context, p store.DeleteParams) (bool, error) {
	if err := s.made(); err != nil {
		return false, err
	}
	// The deleted record's fence goes into the mirror's tombstone, which
	// keeps a reader that fetched the record just before from restoring it.
	var fence int64
	if rec, err := s.authority.Get(ctx, p.ID); err == nil {
		fence = rec.Fence
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, wrap(err)
	}
	existed, err := s.authority.Delete(ctx, p)
	if err != nil {
		// The delete may have landed and only its reply been lost: the
		// mirror must not go on answering with a record the authority may
		// no longer hold (found by internal/check: replays of a deleted
		// key). Dropping it costs at most a read from the authority.
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mirrorDropTimeout)
		defer cancel()
		if merr := s.dropMirror(mctx, p.ID, fence); merr != nil {
			return false, errors.Join(wrap(err), merr)
		}
		return false, wrap(err)
	}
	if p.Fence != 0 && !existed {
		return false, nil // another attempt's record, or none: the mirror stays
	}
	return existed, s.dropMirror(ctx, p.ID, fence)
}

// mirrorDropTimeout bounds the drop of a mirror after a failed delete,
// which runs even when the caller's context has ended.
const mirrorDropTimeout = time.Second

// dropMirror deletes the mirror of id and leaves the tombstone of fence.
func (s *Store) dropMirror(ctx context.Context, id store.ID, fence int64) error {
	if err := deleteScript.Run(ctx, s.redis, []string{s.mirrorKey(id)}, fence, tombstoneMs).Err(); err != nil {
		return fmt.Errorf("layered: delete mirror: %w", err)
	}
	return nil
}

// tombstoneMs is how long the mirror of a deleted or released key refuses
// write-backs of the record it replaced: far longer than a reader takes
// between fetching a record from the authority and writing it back.
const tombstoneMs = int64(time.Minute / time.Millisecond)

// mirrored reads the mirror of id. A miss, or a Redis failure, reports
// false: the caller asks the authority.
func (s *Store) mirrored(ctx context.Context, id store.ID) (store.Record, bool) {
	f, err := getScript.Run(ctx, s.redis, []string{s.mirrorKey(id)}).StringSlice()
	if err != nil {
		s.cacheFailed("get", err)
		return store.Record{}, false
	}
	if len(f) == 0 {
		return store.Record{}, false
	}
	rec, err := decode(id, f)
	if err != nil {
		s.cacheFailed("get", err)
		return store.Record{}, false
	}
	return rec, true
}

// mirror copies rec, as the authority returned it, into Redis: a
// PROCESSING record for the rest of its lease, a COMPLETED one for the
// rest of its retention. An UNKNOWN record is not mirrored: its way out
// (Claim, Resolve, a late Complete) is decided by the authority, and a
// copy could outlive it.
func (s *Store) mirror(ctx context.Context, rec store.Record) {
	ttl := rec.TTL.Milliseconds()
	if ttl <= 0 || ctx.Err() != nil {
		return
	}
	state, status, completed, header, body := "P", 0, int64(0), []byte(nil), []byte(nil)
	switch rec.State {
	case store.StateProcessing:
	case store.StateCompleted:
		if rec.Result == nil {
			return
		}
		state, status, completed = "C", rec.Result.Status, rec.CompletedAt.UnixMicro()
		header, body = recordcodec.AppendHeader(nil, rec.Result.Header), rec.Result.Body
	default:
		return
	}
	err := putScript.Run(ctx, s.redis, []string{s.mirrorKey(rec.ID)}, state, rec.Owner, rec.Fence, rec.Fingerprint,
		rec.AcquiredAt.UnixMicro(), completed, status, header, body, ttl, rec.Label).Err()
	s.cacheFailed("put", err)
}

func (s *Store) cacheFailed(op string, err error) {
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("layered: Redis mirror "+op+" failed; the authority answers", "err", err)
	}
}

// wrap prefixes the authority's errors, keeping the sentinels of the Store
// contract (ErrLeaseLost, ErrNotFound, ErrNotUnknown, ErrStaleFence) bare.
func wrap(err error) error {
	if err == nil || errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrNotFound) ||
		errors.Is(err, store.ErrNotUnknown) || errors.Is(err, store.ErrStaleFence) {
		return err
	}
	return fmt.Errorf("layered: %w", err)
}

// decode parses get.lua's reply.
func decode(id store.ID, f []string) (store.Record, error) {
	rec, err := redisrecord.Record(id, f, time.UnixMicro)
	if err != nil {
		return store.Record{}, fmt.Errorf("layered: corrupt mirror: %w", err)
	}
	return rec, nil
}

var _ store.Store = (*Store)(nil)
