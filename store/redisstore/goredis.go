package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// New returns a store on a go-redis client: *redis.Client, a Sentinel
// failover client, *redis.ClusterClient or *redis.Ring (on a Ring,
// ListUnknown fails: its index is spread over the shards). The client
// must honour context deadlines (see the package documentation): New
// returns ErrNoContextTimeout for one built without ContextTimeoutEnabled.
func New(client redis.Scripter, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	if ignoresDeadlines(client) {
		return nil, fmt.Errorf("%w (got a %T)", ErrNoContextTimeout, client)
	}
	if opts != nil && opts.NearCache {
		return nil, errors.New("redisstore: NearCache needs a rueidis client (NewRueidis): go-redis has no client-side caching")
	}
	if opts != nil && opts.Functions {
		return nil, errors.New("redisstore: Functions needs a rueidis client (NewRueidis)")
	}
	r := goredisRunner{c: client}
	r.p, _ = client.(pipeliner)
	r.cluster, _ = client.(*redis.ClusterClient)
	r.once, _ = client.(processor)
	mode := indexSingle
	switch client.(type) {
	case *redis.ClusterClient:
		mode = indexPerSlot
	case *redis.Ring:
		mode = indexSharded
	}
	s, err := newStore(r, mode, opts)
	if err != nil {
		return nil, err
	}
	if s.info = goredisInfo(client); s.info == nil && !s.checked.Load() {
		return nil, fmt.Errorf("%w (got a %T)", errNoInfo, client)
	}
	if s.replicas == 0 {
		return s, nil
	}
	if s.acks, err = newAcker(client, s.ackTimeout); err != nil {
		return nil, err
	}
	return s, nil
}

// goredisRunner runs the scripts on a go-redis client.
type goredisRunner struct {
	c       redis.Scripter
	p       pipeliner            // nil when the client has no pipeline
	cluster *redis.ClusterClient // the client when it is one, for followTopology
	// once runs the scripts, each call sent at most once (see once.go);
	// nil for a client without Process, which go-redis's Script runs.
	once processor
}

// script runs s on the client.
func (r goredisRunner) script(ctx context.Context, s *script, keys []string, args []any) *redis.Cmd {
	if r.once == nil {
		return s.goredis.Run(ctx, r.c, keys, args...)
	}
	return runScriptOnce(ctx, r.once, s, keys, args)
}

// pipeliner is the part of a go-redis client that rangeByLex uses.
type pipeliner interface{ Pipeline() redis.Pipeliner }

func (r goredisRunner) run(ctx context.Context, s *script, keys []string, args []any) (reply, error) {
	v, err := r.script(ctx, s, keys, args).Result()
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
		v, err = r.script(ctx, s, keys, args).Result()
	}
	followTopology(r.cluster, err)
	return goredisReply(v, err)
}

func (r goredisRunner) runBatch(ctx context.Context, keys []string, args []any) ([]answer, error) {
	v, err := r.script(ctx, batchScript, keys, args).Result()
	if err != nil {
		followTopology(r.cluster, err)
		return nil, err
	}
	elems, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("redisstore: batch reply of type %T", v)
	}
	out := make([]answer, len(elems))
	for i, e := range elems {
		switch e := e.(type) {
		case nil: // a Lua false
			out[i].r.kind = replyNil
		case error: // that operation's script raised an error
			out[i].err = e
		default:
			out[i].r, out[i].err = goredisReply(e, nil)
		}
	}
	return out, nil
}

func (r goredisRunner) rangeByLex(ctx context.Context, keys, mins []string, max string, count int) ([][]string, error) {
	if r.p == nil {
		return nil, fmt.Errorf("redisstore: a %T cannot pipeline the index reads", r.c)
	}
	pipe := r.p.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.ZRangeByLex(ctx, k, &redis.ZRangeBy{Min: mins[i], Max: max, Count: int64(count)})
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		followTopology(r.cluster, err)
		return nil, err
	}
	out := make([][]string, len(keys))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
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

// followTopology asks a cluster client to reload its slot map soon after
// a call failed without a reply from Redis: a refused dial, a reset or
// closed connection, a timeout. go-redis reloads the map on MOVED, ASK and
// READONLY, and otherwise only every ClusterStateReloadInterval (60s by
// default since v9.22, go-redis issue #3979): when a primary dies and a
// replica takes over its slots, no node it can reach answers MOVED for
// them, so a running client kept dialling the dead node (issue 22: 503 for
// that shard's keys until the load ended). The reload runs in the
// background and go-redis coalesces the requests (one at a time, at most
// every 200ms), so a burst of failures costs a few CLUSTER SLOTS. A reply
// from Redis (an error such as CLUSTERDOWN or TRYAGAIN, or redis.Nil) says
// the node is alive and routed to, and a context the caller cancelled or
// a client closed says nothing about the node: none of them reloads.
func followTopology(c *redis.ClusterClient, err error) {
	if c == nil || err == nil || errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return
	}
	c.ReloadState(context.Background())
}

// ErrNoContextTimeout is returned by New for a go-redis client built
// without ContextTimeoutEnabled: it would wait out its read timeout (3 s
// by default) past a store call's deadline, so that a renewal stuck on a
// stalled server would outlive its lease.
var ErrNoContextTimeout = errors.New("redisstore: the go-redis client must honour context deadlines: set ContextTimeoutEnabled: true in its redis.Options, FailoverOptions, ClusterOptions or RingOptions")

// ignoresDeadlines reports whether client is a go-redis client whose
// options say it does not honour context deadlines. Another Scripter is
// taken at its word.
func ignoresDeadlines(client redis.Scripter) bool {
	switch c := client.(type) {
	case *redis.Client:
		return !c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return !c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return !c.Options().ContextTimeoutEnabled
	}
	return false
}
