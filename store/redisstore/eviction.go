package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// NoEviction is the maxmemory-policy under which Redis never drops a key
// to make room: it refuses the write instead.
const NoEviction = "noeviction"

// ErrMayEvict is wrapped by the error of a store's first call (and of
// CheckEviction) when a Redis master may evict the store's records under
// memory pressure (its maxmemory-policy is not noeviction), or when the
// server refuses to say (INFO refused by an ACL). A record evicted is a key forgotten: its work runs again.
// Options.AllowEviction turns the check off.
var ErrMayEvict = errors.New("redisstore: the Redis server may evict keys")

// nodeInfo is the INFO of one Redis node: addr names it in errors.
type nodeInfo struct{ addr, text string }

// infoReader reads INFO memory and replication from every node that may
// hold the store's keys as a master.
type infoReader func(ctx context.Context) ([]nodeInfo, error)

// infoSections are the INFO sections the check reads: maxmemory and
// maxmemory_policy are in memory (readable where CONFIG is disabled, as
// on managed services), the node's role in replication.
var infoSections = []string{"memory", "replication"}

// goredisInfo returns the INFO reader of a go-redis client: every master
// of a cluster, every shard of a ring, the one server (a Sentinel
// failover client's is its master). It is nil for a client without INFO
// (a bare Scripter).
func goredisInfo(client redis.Scripter) infoReader {
	each := func(ctx context.Context, forEach func(context.Context, func(context.Context, *redis.Client) error) error) ([]nodeInfo, error) {
		var mu sync.Mutex
		var out []nodeInfo
		err := forEach(ctx, func(ctx context.Context, c *redis.Client) error {
			text, err := c.Info(ctx, infoSections...).Result()
			if err != nil {
				return fmt.Errorf("%s: %w", c.Options().Addr, err)
			}
			mu.Lock()
			defer mu.Unlock()
			out = append(out, nodeInfo{c.Options().Addr, text})
			return nil
		})
		return out, err
	}
	switch c := client.(type) {
	case *redis.ClusterClient:
		return func(ctx context.Context) ([]nodeInfo, error) { return each(ctx, c.ForEachMaster) }
	case *redis.Ring:
		return func(ctx context.Context) ([]nodeInfo, error) { return each(ctx, c.ForEachShard) }
	case *redis.Client:
		return func(ctx context.Context) ([]nodeInfo, error) {
			return each(ctx, func(ctx context.Context, fn func(context.Context, *redis.Client) error) error { return fn(ctx, c) })
		}
	}
	c, ok := client.(interface {
		Info(ctx context.Context, section ...string) *redis.StringCmd
	})
	if !ok {
		return nil
	}
	return func(ctx context.Context) ([]nodeInfo, error) {
		text, err := c.Info(ctx, infoSections...).Result()
		return []nodeInfo{{"the server", text}}, err
	}
}

// rueidisInfo returns the INFO reader of a rueidis client: every node it
// knows (of a cluster: the check skips the replicas; of a Sentinel set:
// the master; else the one server).
func rueidisInfo(client rueidis.Client) infoReader {
	return func(ctx context.Context) ([]nodeInfo, error) {
		var out []nodeInfo
		for addr, c := range client.Nodes() {
			text, err := c.Do(ctx, c.B().Info().Section(infoSections...).Build()).ToString()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", addr, err)
			}
			out = append(out, nodeInfo{addr, text})
		}
		return out, nil
	}
}

// infoField returns the value of field in an INFO reply.
func infoField(text, field string) (string, bool) {
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, true
		}
	}
	return "", false
}

// CheckEviction returns nil when no Redis master that may hold the
// store's records can evict them: on each (every master of a cluster,
// every shard of a ring, the master of a Sentinel set, the one server)
// maxmemory-policy is noeviction. (maxmemory 0 does not do: one CONFIG
// SET maxmemory, after the check, would start the evictions.) It reads
// INFO, not CONFIG GET, so it works where CONFIG is disabled (managed
// services). Any other policy drops keys when Redis runs out of memory:
// the allkeys-* policies any, the volatile-* ones the settled records
// (results, tombstones), which have a TTL; a record evicted is a key
// forgotten, and its retry runs the work again. The error wraps ErrMayEvict when a
// master may evict or refuses INFO; other errors (a network error) say
// nothing either way. The store runs it before its first call unless
// Options.AllowEviction is set; idem serve runs it at start.
func (s *Store) CheckEviction(ctx context.Context) error {
	if err := s.made(); err != nil {
		return err
	}
	if s.info == nil {
		return errNoInfo
	}
	nodes, err := s.info(ctx)
	if err != nil {
		if isServerError(err) { // refused, by an ACL or a renamed command
			return fmt.Errorf("%w: cannot read maxmemory-policy: INFO memory: %w; grant the client's user INFO, "+
				"or set Options.AllowEviction (allow_eviction=on in a store URL) once it is known to be %s", ErrMayEvict, err, NoEviction)
		}
		return fmt.Errorf("redisstore: reading maxmemory-policy: INFO memory: %w", err)
	}
	masters := 0
	for _, n := range nodes {
		if role, ok := infoField(n.text, "role"); ok && role != "master" {
			continue // a replica evicts nothing of its own (replica-ignore-maxmemory); its master's policy counts
		}
		masters++
		policy, okPolicy := infoField(n.text, "maxmemory_policy")
		maxmemory, okMax := infoField(n.text, "maxmemory")
		switch {
		case !okPolicy || !okMax:
			return fmt.Errorf("%w: INFO memory of %s has no maxmemory_policy or maxmemory", ErrMayEvict, n.addr)
		case policy != NoEviction:
			return fmt.Errorf("%w: %s: maxmemory-policy is %s with maxmemory %s: out of memory it drops idem's records, "+
				"a COMPLETED one too (results have a TTL, which volatile-* policies take), and a retry of a key so forgotten runs its work again; "+
				"set maxmemory-policy %s, or Options.AllowEviction (allow_eviction=on in a store URL) to accept the risk",
				ErrMayEvict, n.addr, policy, maxmemory, NoEviction)
		}
	}
	if masters == 0 {
		return fmt.Errorf("redisstore: reading maxmemory-policy: no master answered INFO")
	}
	return nil
}

// errNoInfo is the answer of CheckEviction for a client without INFO.
var errNoInfo = fmt.Errorf("%w: the client cannot run INFO to tell; give New a go-redis client, "+
	"or set Options.AllowEviction once the server's maxmemory-policy is known to be %s", ErrMayEvict, NoEviction)

// isServerError reports whether err is an error reply of Redis (not a
// network or context error).
func isServerError(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		return true
	}
	var rerr *rueidis.RedisError
	return errors.As(err, &rerr)
}

// ready runs CheckEviction before the store's first call, and again
// after a call it refused: the error of a call is that of the check, so
// the store refuses to work on an evicting Redis until it is
// reconfigured. Once a check passed (or with Options.AllowEviction) it
// costs an atomic load. Callers wait for one check at a time, each for
// as long as its context allows.
func (s *Store) ready(ctx context.Context) error {
	if err := s.made(); err != nil {
		return err
	}
	if s.checked.Load() {
		return nil
	}
	select {
	case s.checking <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.checking }()
	if s.checked.Load() {
		return nil
	}
	if err := s.CheckEviction(ctx); err != nil {
		return err
	}
	s.checked.Store(true)
	return nil
}
