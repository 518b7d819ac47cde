package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// TestFenceOfEndedRecordBeatsClock: the fence of an ended record (a
// released tombstone, or a COMPLETED record past its retention whose key
// still lives) or of an abandoned one taken over wins over the clock, so fences keep increasing when the server's clock
// is behind the last fence (a clock stepped back, a failover to a host
// whose clock is behind). The test plants records whose fence is far
// ahead of the clock.
func TestFenceOfEndedRecordBeatsClock(t *testing.T) {
	ctx := context.Background()
	client := testenv.Redis(t)
	s, err := redisstore.New(client, &redisstore.Options{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	const ahead = "9000000000000000" // µs: the year 2255
	plant := map[string]string{
		// The encoding of record.lua: a tombstone, a COMPLETED record whose
		// retention ended, and a PROCESSING record whose lease ended (never
		// absent: the same request takes it over).
		"tombstone": `redis.call('SET', KEYS[1], struct.pack('>c1dI4c0', 'X', 0, #ARGV[1], ARGV[1]), 'PX', 60000)`,
		"ended retention": `redis.call('SET', KEYS[1], struct.pack('>c1dI4c0I4c0I4c0dddI4c0I4c0', 'C', 1000, #ARGV[1], ARGV[1],
			1, 'o', 2, 'fp', 1000, 1000, 200, 0, '', 0, ''), 'PX', 60000)`,
		"ended lease": `redis.call('SET', KEYS[1], struct.pack('>c1dI4c0I4c0I4c0d', 'P', 1000, #ARGV[1], ARGV[1],
			1, 'o', 2, 'fp', 1000))`,
	}
	for name, lua := range plant {
		t.Run(name, func(t *testing.T) {
			id := store.ID{Tenant: "t", Key: name}
			if err := client.Eval(ctx, lua, []string{s.RecordKey(id)}, ahead).Err(); err != nil && err.Error() != "redis: nil" {
				t.Fatal(err)
			}
			res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "new", Fingerprint: "fp", LeaseDuration: time.Minute, TakeOver: true})
			if err != nil || !res.Acquired {
				t.Fatalf("Acquire = %+v, %v; want acquired", res, err)
			}
			if want := int64(9000000000000001); res.Record.Fence != want {
				t.Fatalf("fence = %d, want %d (the planted fence plus one)", res.Record.Fence, want)
			}
		})
	}
}
