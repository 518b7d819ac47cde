package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/redisrecord"
	"github.com/idemkit/idem/store/recordcodec"
	"github.com/redis/go-redis/v9"
)

var (
	// recordLua decodes a record for acquire.lua and get.lua; it goes in
	// front of each (see acquireSrc and getSrc).
	//go:embed record.lua
	recordLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed complete.lua
	completeLua string
	//go:embed extend.lua
	extendLua string
	//go:embed release.lua
	releaseLua string
	//go:embed get.lua
	getLua string
	//go:embed delete.lua
	deleteLua string

	// The two scripts that decode a whole record, each with the decoding
	// in front: a script cannot load another, and EVALSHA takes the SHA
	// of the source as sent.
	acquireSrc = recordLua + acquireLua
	getSrc     = recordLua + getLua
)

// script is one Lua script, run by EVALSHA with a fallback to EVAL when
// the server does not know it yet (NOSCRIPT).
type script struct {
	goredis *redis.Script
}

func newScript(src string) *script { return &script{goredis: redis.NewScript(src)} }

var (
	acquireScript  = newScript(acquireSrc)
	completeScript = newScript(completeLua)
	extendScript   = newScript(extendLua)
	releaseScript  = newScript(releaseLua)
	getScript      = newScript(getSrc)
	deleteScript   = newScript(deleteLua)
)

// reply is what a script answered, in the three shapes the scripts use:
// an integer (transitions), a string (an acquisition) or an array of
// strings (a record). Each client library parses its own replies into it
// without going through an intermediate []any or []string.
type reply struct {
	kind   replyKind
	num    int64
	str    string
	fields []string
}

type replyKind uint8

const (
	replyNil replyKind = iota // a Lua false or nil
	replyInt
	replyStr
	replyArray
)

// runner runs a script atomically and returns its reply. Each Redis client
// library has one.
type runner interface {
	run(ctx context.Context, s *script, keys []string, args []any) (reply, error)
}

type goredisRunner struct{ c redis.Scripter }

func (r goredisRunner) run(ctx context.Context, s *script, keys []string, args []any) (reply, error) {
	v, err := s.goredis.Run(ctx, r.c, keys, args...).Result()
	// TRYAGAIN: a cluster slot is migrating and the script's keys are
	// split between the two nodes for a moment; the script did not run.
	// go-redis retries it only briefly, so the store waits a little more
	// before answering with a (retryable) error.
	for attempt := 1; redis.IsTryAgainError(err) && attempt < redirectRetries; attempt++ {
		select {
		case <-ctx.Done():
			return reply{}, errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(attempt) * 10 * time.Millisecond):
		}
		v, err = s.goredis.Run(ctx, r.c, keys, args...).Result()
	}
	return goredisReply(v, err)
}

// goredisReply converts what go-redis parsed from a script's reply.
func goredisReply(v any, err error) (reply, error) {
	if err == redis.Nil {
		return reply{kind: replyNil}, nil
	}
	if err != nil {
		return reply{}, err
	}
	switch v := v.(type) {
	case int64:
		return reply{kind: replyInt, num: v}, nil
	case string:
		return reply{kind: replyStr, str: v}, nil
	case []any:
		fields := make([]string, len(v))
		for i, f := range v {
			s, ok := f.(string)
			if !ok {
				return reply{}, fmt.Errorf("redisstore: reply field %d is a %T, not a string", i, f)
			}
			fields[i] = s
		}
		return reply{kind: replyArray, fields: fields}, nil
	}
	return reply{}, fmt.Errorf("redisstore: unexpected reply of type %T", v)
}

// fenceGraceMs is how much longer a key lives than its record, keeping the
// record's fence for the next acquisition.
const fenceGraceMs = int64(time.Hour / time.Millisecond)

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// Prefix starts every Redis key the store writes. Zero means "idem:".
	// It may not hold '{' or '}', which would break the hash tag.
	Prefix string
	// ReplicaAcks is how many replicas must acknowledge the write of an
	// acquire and of a complete (Redis WAIT, on the connection that ran
	// the script) before the store reports success. Zero means no waiting.
	// When too few acknowledge in time the call fails with an error
	// wrapping ErrNotReplicated; a failed acquire releases the record it
	// wrote. It needs a *redis.Client, a Sentinel failover client or a
	// *redis.ClusterClient. What it narrows, and what it does not, is in
	// the package documentation and docs/deployment.md.
	ReplicaAcks int
	// ReplicaAckTimeout bounds the wait for ReplicaAcks. Zero means 500ms.
	// It must be below the client's read timeout.
	ReplicaAckTimeout time.Duration
}

// Store is an idem.Store on Redis. It is safe for concurrent use.
type Store struct {
	r      runner
	prefix string

	acks       ackRunner // nil when ReplicaAcks is zero
	replicas   int
	ackTimeout time.Duration
}

// New returns a store on a go-redis client: *redis.Client, a Sentinel
// failover client, *redis.ClusterClient, *redis.Ring or any
// redis.UniversalClient.
func New(client redis.Scripter, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	s, err := newStore(goredisRunner{client}, opts)
	if err != nil || s.replicas == 0 {
		return s, err
	}
	if s.acks, err = newAcker(client, s.ackTimeout); err != nil {
		return nil, err
	}
	return s, nil
}

func newStore(r runner, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = "idem:"
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q holds a brace, which would break the hash tag", o.Prefix)
	}
	if o.ReplicaAcks < 0 || o.ReplicaAckTimeout < 0 {
		return nil, fmt.Errorf("redisstore: ReplicaAcks %d and ReplicaAckTimeout %v may not be negative", o.ReplicaAcks, o.ReplicaAckTimeout)
	}
	if o.ReplicaAckTimeout == 0 {
		o.ReplicaAckTimeout = defaultReplicaAckTimeout
	}
	return &Store{r: r, prefix: o.Prefix, replicas: o.ReplicaAcks, ackTimeout: o.ReplicaAckTimeout}, nil
}

// recordKey returns the Redis key of the record of id.
func (s *Store) recordKey(id idem.ID) string {
	return redisrecord.Key(s.prefix, id)
}

func (s *Store) keys(id idem.ID) []string { return []string{s.recordKey(id)} }

// Acquire implements idem.Store.
func (s *Store) Acquire(ctx context.Context, p idem.AcquireParams) (idem.AcquireResult, error) {
	r, notReplicated, err := s.write(ctx, acquireScript, s.keys(p.ID),
		[]any{p.Owner, p.Fingerprint, p.LeaseDuration.Milliseconds(), fenceGraceMs})
	if err != nil {
		return idem.AcquireResult{}, fmt.Errorf("redisstore: acquire: %w", err)
	}
	if r.kind == replyStr { // acquired: "fence:acquired_ms"
		fence, at, err := parseAcquired(r.str)
		if err != nil {
			return idem.AcquireResult{}, fmt.Errorf("redisstore: acquire: %w", err)
		}
		if notReplicated != nil {
			return idem.AcquireResult{}, s.releaseUnreplicated(ctx, idem.LeaseRef{ID: p.ID, Owner: p.Owner, Fence: fence}, notReplicated)
		}
		return idem.AcquireResult{Acquired: true, Record: idem.Record{ID: p.ID, State: idem.StateProcessing,
			Owner: p.Owner, Fence: fence, Fingerprint: p.Fingerprint, AcquiredAt: time.UnixMilli(at), TTL: p.LeaseDuration}}, nil
	}
	rec, err := parseRecord(p.ID, r)
	if err != nil {
		return idem.AcquireResult{}, fmt.Errorf("redisstore: acquire: %w", err)
	}
	if notReplicated != nil && rec.State == idem.StateProcessing && rec.Owner == p.Owner {
		// The caller's own earlier try (whose reply was lost) acquired the
		// key, and the engine would take this record as its lease: it must
		// be replicated like a fresh acquisition, or released.
		return idem.AcquireResult{}, s.releaseUnreplicated(ctx, idem.LeaseRef{ID: p.ID, Owner: p.Owner, Fence: rec.Fence}, notReplicated)
	}
	return idem.AcquireResult{Record: rec}, nil
}

// parseAcquired decodes acquire.lua's reply to a successful acquisition.
func parseAcquired(s string) (fence, acquiredMs int64, err error) {
	f, at, ok := strings.Cut(s, ":")
	if ok {
		fence, err = strconv.ParseInt(f, 10, 64)
	}
	if ok && err == nil {
		acquiredMs, err = strconv.ParseInt(at, 10, 64)
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("%w: acquire reply %q", errCorrupt, s)
	}
	return fence, acquiredMs, nil
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, p idem.CompleteParams) error {
	return s.transition(ctx, "complete", s.write, completeScript, s.keys(p.ID), []any{p.Owner, p.Fence,
		p.Retention.Milliseconds(), p.Result.Status, recordcodec.AppendHeader(nil, p.Result.Header), p.Result.Body, fenceGraceMs})
}

// Extend implements idem.Store.
func (s *Store) Extend(ctx context.Context, p idem.ExtendParams) error {
	return s.transition(ctx, "extend", s.run, extendScript, s.keys(p.ID), []any{p.Owner, p.Fence, p.LeaseDuration.Milliseconds(), fenceGraceMs})
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, p idem.LeaseRef) error {
	return s.transition(ctx, "release", s.run, releaseScript, s.keys(p.ID), []any{p.Owner, p.Fence, fenceGraceMs})
}

// transition runs a script that answers 1 when the caller's lease allowed
// the transition and 0 when the lease is lost.
func (s *Store) transition(ctx context.Context, op string, run runFunc, sc *script, keys []string, args []any) error {
	r, notReplicated, err := run(ctx, sc, keys, args)
	switch {
	case err != nil:
		return fmt.Errorf("redisstore: %s: %w", op, err)
	case r.kind == replyInt && r.num == 1 && notReplicated != nil:
		return fmt.Errorf("redisstore: %s: %w", op, notReplicated)
	case r.kind == replyInt && r.num == 1:
		return nil
	case r.kind == replyInt && r.num == 0:
		return idem.ErrLeaseLost
	}
	return fmt.Errorf("redisstore: %s: bad reply %+v", op, r)
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	r, err := s.r.run(ctx, getScript, s.keys(id), nil)
	if err != nil {
		return idem.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	if r.kind == replyArray && len(r.fields) == 0 {
		return idem.Record{}, idem.ErrNotFound
	}
	rec, err := parseRecord(id, r)
	if err != nil {
		return idem.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	return rec, nil
}

// Delete implements idem.Store.
func (s *Store) Delete(ctx context.Context, id idem.ID) (bool, error) {
	r, err := s.r.run(ctx, deleteScript, s.keys(id), []any{fenceGraceMs})
	if err != nil {
		return false, fmt.Errorf("redisstore: delete: %w", err)
	}
	if r.kind != replyInt {
		return false, fmt.Errorf("redisstore: delete: bad reply %+v", r)
	}
	return r.num == 1, nil
}

// errCorrupt reports a record that does not decode.
var errCorrupt = errors.New("redisstore: corrupt record")

// parseRecord decodes the reply of get.lua: {'0', state, owner, fence,
// fingerprint, acquired_ms, completed_ms, status, header, body, pttl_ms}.
func parseRecord(id idem.ID, r reply) (idem.Record, error) {
	f := r.fields
	if r.kind != replyArray || len(f) != 11 || f[0] != "0" {
		return idem.Record{}, fmt.Errorf("%w: %d fields", errCorrupt, len(f))
	}
	rec, err := redisrecord.Record(id, f[1:], time.UnixMilli)
	if err != nil {
		return idem.Record{}, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	return rec, nil
}

var _ idem.Store = (*Store)(nil)
