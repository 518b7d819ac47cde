package redisstore_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/store/redisstore"
)

// A go-redis client that ignores context deadlines would keep a renewal
// stuck on a stalled server past its lease: New refuses it, by name, for
// every kind of go-redis client, and takes one that honours them.
func TestNewRefusesAClientWithoutContextTimeouts(t *testing.T) {
	const addr = "127.0.0.1:1" // never dialled: New sends nothing
	for _, tc := range []struct {
		name   string
		client func(enabled bool) redis.UniversalClient
	}{
		{"client", func(on bool) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: on})
		}},
		{"failover", func(on bool) redis.UniversalClient {
			return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}, ContextTimeoutEnabled: on})
		}},
		{"cluster", func(on bool) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: on})
		}},
		{"ring", func(on bool) redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, ContextTimeoutEnabled: on})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off := tc.client(false)
			defer off.Close()
			if _, err := redisstore.New(off, nil); !errors.Is(err, redisstore.ErrNoContextTimeout) {
				t.Errorf("New without ContextTimeoutEnabled = %v; want ErrNoContextTimeout", err)
			}
			on := tc.client(true)
			defer on.Close()
			if _, err := redisstore.New(on, nil); err != nil {
				t.Errorf("New with ContextTimeoutEnabled = %v; want a store", err)
			}
		})
	}
}
