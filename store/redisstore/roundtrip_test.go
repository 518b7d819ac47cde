package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store/redisstore"
)

// roundTrips is a go-redis hook that counts the round trips a client
// makes: one per command, one per pipeline.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestRoundTrips: a first request costs two round trips (the acquire and
// the completion scripts) and a replay one, with the UNKNOWN state and its
// index in place: the path with no failure pays nothing for them (issue 12).
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	client := testenv.Redis(t)
	var trips roundTrips
	client.AddHook(&trips)
	store, err := redisstore.New(client, &redisstore.Options{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := idem.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	work := func(context.Context, *idem.Lease) ([]byte, error) { return []byte("ok"), nil }
	key := "k"
	do := func(key string) {
		t.Helper()
		if _, _, err := engine.Do(ctx, idem.Request{Tenant: "t", Key: key, Fingerprint: "f"}, work); err != nil {
			t.Fatal(err)
		}
	}
	do(key + "-warm-up") // loads the scripts (NOSCRIPT, then EVAL) if the server lacks them
	for _, step := range []struct {
		name string
		want int64
	}{{"first request", 2}, {"replay", 1}} {
		before := trips.n.Load()
		do(key)
		if got := trips.n.Load() - before; got != step.want {
			t.Errorf("%s: %d round trips to Redis; want %d", step.name, got, step.want)
		}
	}
}
