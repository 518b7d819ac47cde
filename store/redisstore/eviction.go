package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// NoEviction is the maxmemory-policy under which Redis never drops a key
// to make room: it refuses the write instead.
const NoEviction = "noeviction"

// infoSection reads one section of the server's INFO.
type infoSection func(ctx context.Context, section string) (string, error)

// goredisInfo returns the INFO reader of a go-redis client, or nil when it
// has none (a bare Scripter).
func goredisInfo(client redis.Scripter) infoSection {
	c, ok := client.(interface {
		Info(ctx context.Context, section ...string) *redis.StringCmd
	})
	if !ok {
		return nil
	}
	return func(ctx context.Context, section string) (string, error) { return c.Info(ctx, section).Result() }
}

// rueidisInfo returns the INFO reader of a rueidis client.
func rueidisInfo(client rueidis.Client) infoSection {
	return func(ctx context.Context, section string) (string, error) {
		return client.Do(ctx, client.B().Info().Section(section).Build()).ToString()
	}
}

// EvictionPolicy returns the server's maxmemory-policy, as INFO memory
// reports it (on a cluster, that of the node the client asks). Any
// policy but NoEviction lets Redis drop the store's records when it runs
// out of memory: an UNKNOWN record or a result dropped so lets its retry
// run the work again. The volatile-* policies evict only keys with a TTL:
// they take results (COMPLETED records) and tombstones, never an
// unsettled record (PROCESSING, UNKNOWN), which has none.
func (s *Store) EvictionPolicy(ctx context.Context) (string, error) {
	if err := s.made(); err != nil {
		return "", err
	}
	if s.info == nil {
		return "", errors.New("redisstore: the client cannot run INFO")
	}
	text, err := s.info(ctx, "memory")
	if err != nil {
		return "", fmt.Errorf("redisstore: INFO memory: %w", err)
	}
	for line := range strings.SplitSeq(text, "\n") {
		if policy, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			return policy, nil
		}
	}
	return "", errors.New("redisstore: INFO memory has no maxmemory_policy")
}
