package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/store"
)

// ErrNotReplicated is returned, wrapped, when a write reached the primary
// but fewer replicas than Options.ReplicaAcks acknowledged it within
// Options.ReplicaAckTimeout. The engine reports it as idem.ErrStore (a
// retryable 503); the request's work has not started.
var ErrNotReplicated = errors.New("redisstore: write not acknowledged by enough replicas")

// defaultReplicaAckTimeout is what a zero Options.ReplicaAckTimeout means.
const defaultReplicaAckTimeout = 500 * time.Millisecond

// ackRunner runs a script and then WAIT on the same connection, so WAIT
// counts the replicas that have this script's writes: WAIT only knows the
// replication offset of the connection it runs on.
// On a WAIT failure it returns the script's reply with an error wrapping
// ErrNotReplicated.
type ackRunner interface {
	runAcked(ctx context.Context, s *script, keys []string, args []any, replicas int, timeout time.Duration) (r reply, acked int, err error)
}

// goredisAcker pipelines EVALSHA and WAIT to one node: a pipeline of a
// *redis.Client runs on one connection.
type goredisAcker struct {
	// node returns the client of the primary that owns key.
	node func(ctx context.Context, key string) (*redis.Client, error)
	// cluster is the cluster client, nil for a single primary.
	cluster *redis.ClusterClient
	// askNodes caches, by address, the cluster's clients of the nodes
	// that answered ASK: the targets of slot migrations.
	askNodes sync.Map
}

// newAcker returns the ackRunner of a go-redis client, or an error when
// the client cannot run WAIT on the connection that ran the script.
func newAcker(client redis.Scripter, timeout time.Duration) (ackRunner, error) {
	var readTimeout time.Duration
	a := &goredisAcker{}
	switch c := client.(type) {
	case *redis.Client: // a plain client or a Sentinel failover client
		readTimeout = c.Options().ReadTimeout
		a.node = func(context.Context, string) (*redis.Client, error) { return c, nil }
	case *redis.ClusterClient:
		readTimeout = c.Options().ReadTimeout
		a.node = c.MasterForKey
		a.cluster = c
	default:
		return nil, fmt.Errorf("redisstore: ReplicaAcks needs a *redis.Client, a Sentinel failover client or a *redis.ClusterClient, not %T", client)
	}
	// go-redis reads a pipeline's replies with the client's read timeout
	// (zero means its default of 3s), so WAIT must return before that.
	if readTimeout == 0 {
		readTimeout = 3 * time.Second
	}
	if readTimeout > 0 && timeout >= readTimeout {
		return nil, fmt.Errorf("redisstore: ReplicaAckTimeout %v is not below the client's read timeout %v", timeout, readTimeout)
	}
	return a, nil
}

// redirectRetries bounds how often runAcked follows a MOVED, ASK or
// TRYAGAIN reply, which all mean the script did not run.
const redirectRetries = 5

func (a *goredisAcker) runAcked(ctx context.Context, s *script, keys []string, args []any, replicas int, timeout time.Duration) (reply, int, error) {
	var err error
	var ask *redis.Client // the node an ASK reply sent us to, for one attempt
	// Following an ASK is part of the attempt that got it.
	for attempt := 0; attempt < redirectRetries || ask != nil; {
		if ask == nil {
			if attempt > 0 {
				select {
				case <-ctx.Done():
					return reply{}, 0, errors.Join(err, ctx.Err())
				case <-time.After(time.Duration(attempt) * 10 * time.Millisecond):
				}
			}
			attempt++
		}
		node := ask
		if node == nil {
			if node, err = a.node(ctx, keys[0]); err != nil {
				return reply{}, 0, err
			}
		}
		var r reply
		var acked int
		asked := ask != nil
		r, acked, err = runOnce(ctx, node, asked, s, keys, args, replicas, timeout)
		followTopology(a.cluster, err) // the node may be gone: a dead primary's replica took over
		if asked && errors.Is(err, redis.ErrClosed) {
			// The cluster client dropped that node; forget it.
			a.askNodes.Delete(ask.Options().Addr)
		}
		ask = nil
		if a.cluster == nil {
			return r, acked, err
		}
		if _, moved := redis.IsMovedError(err); moved {
			a.cluster.ReloadState(ctx)
			continue
		}
		if addr, isAsk := redis.IsAskError(err); isAsk && !asked {
			// The slot is migrating and the key has left (or is new):
			// run it on the importing node, after ASKING, on one connection.
			var askErr error
			if ask, askErr = a.askNode(ctx, addr); askErr != nil {
				return reply{}, 0, errors.Join(err, askErr)
			}
			continue
		}
		if _, isAsk := redis.IsAskError(err); isAsk || redis.IsTryAgainError(err) {
			continue // an ASK from the importing node itself is retried from the start
		}
		return r, acked, err
	}
	return reply{}, 0, err
}

// askNode returns the cluster's client of the primary at addr.
func (a *goredisAcker) askNode(ctx context.Context, addr string) (*redis.Client, error) {
	if c, ok := a.askNodes.Load(addr); ok {
		return c.(*redis.Client), nil
	}
	var mu sync.Mutex
	var found *redis.Client
	err := a.cluster.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("ASK to %s, which is not a primary of the cluster", addr)
	}
	a.askNodes.Store(addr, found)
	return found, nil
}

// runOnce runs the script and WAIT in one pipeline on node, preceded by
// ASKING when asking.
func runOnce(ctx context.Context, node *redis.Client, asking bool, s *script, keys []string, args []any, replicas int, timeout time.Duration) (reply, int, error) {
	run := func(eval func(pipe redis.Pipeliner) *redis.Cmd) (*redis.Cmd, *redis.Cmd) {
		pipe := node.Pipeline()
		if asking {
			pipe.Do(ctx, "asking")
		}
		e := eval(pipe)
		w := pipe.Do(ctx, "wait", replicas, timeout.Milliseconds())
		_, _ = pipe.Exec(ctx) // each command carries its own error
		return e, w
	}
	// Sent at most once (see once.go): go-redis does not re-send a
	// pipeline that holds such a call.
	eval := func(sha bool) func(pipe redis.Pipeliner) *redis.Cmd {
		return func(pipe redis.Pipeliner) *redis.Cmd {
			cmd := evalCmd(ctx, s, sha, keys, args)
			_ = pipe.Process(ctx, onceCmd{cmd})
			return cmd
		}
	}
	e, w := run(eval(true))
	if redis.HasErrorPrefix(e.Err(), "NOSCRIPT") {
		e, w = run(eval(false))
	}
	r, err := goredisReply(e.Result())
	if err != nil {
		return reply{}, 0, err
	}
	acked, err := w.Int()
	if err != nil {
		// The script ran; whether its writes reached a replica is unknown.
		return r, 0, fmt.Errorf("%w: wait: %w", ErrNotReplicated, err)
	}
	return r, acked, nil
}

// runFunc runs a script; notReplicated is set (wrapping ErrNotReplicated)
// when the script ran but too few replicas acknowledged its writes.
type runFunc func(ctx context.Context, sc *script, keys []string, args []any) (r reply, notReplicated, err error)

// run runs a script without waiting for replicas.
func (s *Store) run(ctx context.Context, sc *script, keys []string, args []any) (reply, error, error) {
	r, err := s.r.run(ctx, sc, keys, args)
	return r, nil, err
}

// acked runs a script and, when Options.ReplicaAcks is set, WAIT after
// it: a write's changes must reach that many replicas, and a read must
// come from a primary that still has them.
func (s *Store) acked(ctx context.Context, sc *script, keys []string, args []any) (reply, error, error) {
	if s.replicas == 0 {
		return s.run(ctx, sc, keys, args)
	}
	if s.acks == nil {
		// A constructor that cannot pin WAIT to the script's connection
		// must refuse ReplicaAcks; never drop it silently.
		return reply{}, nil, errors.New("redisstore: ReplicaAcks is set but this client has no way to run WAIT on the script's connection")
	}
	r, acked, err := s.acks.runAcked(ctx, sc, keys, args, s.replicas, s.ackTimeout)
	switch {
	case err != nil && !errors.Is(err, ErrNotReplicated): // the script did not run
		return reply{}, nil, err
	case err != nil:
		return r, err, nil
	case acked < s.replicas:
		return r, fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, acked, s.replicas, s.ackTimeout), nil
	}
	return r, nil, nil
}

// releaseUnreplicated releases a lease that was acquired on the primary
// but not replicated, so that a retry does not wait for its lease to end,
// and returns the error for the caller of Acquire. The release runs even
// when ctx is cancelled; if it fails the record lives out its lease, then
// is abandoned (UNKNOWN) until someone settles it.
func (s *Store) releaseUnreplicated(ctx context.Context, ref store.LeaseRef, notReplicated error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ackTimeout)
	defer cancel()
	if err := s.Release(ctx, ref); err != nil {
		return fmt.Errorf("redisstore: acquire: %w (and the release of the unreplicated record failed: %w)", notReplicated, err)
	}
	return fmt.Errorf("redisstore: acquire: %w (record released)", notReplicated)
}
