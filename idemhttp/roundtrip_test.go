package idemhttp_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// storeCalls counts the store calls the engine makes, by operation.
type storeCalls struct{ acquire, complete, other atomic.Int64 }

func (c *storeCalls) StoreCall(_ context.Context, op string, _ time.Duration, _ error) {
	switch op {
	case "acquire":
		c.acquire.Add(1)
	case "complete":
		c.complete.Add(1)
	default:
		c.other.Add(1)
	}
}
func (c *storeCalls) LeaseEvent(store.ID, idem.LeaseEvent) {}

func (c *storeCalls) take() [3]int64 {
	return [3]int64{c.acquire.Swap(0), c.complete.Swap(0), c.other.Swap(0)}
}

// commandCounter counts the commands a Redis client sends: its round trips.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestStoreRoundTrips: a first request costs the store exactly two calls
// (acquire, complete) and a replay exactly one (acquire); on Redis each is
// one command, so one round trip.
func TestStoreRoundTrips(t *testing.T) {
	var commands *commandCounter // Redis only
	stores := testenv.Stores()
	stores["redis"] = func(t *testing.T) store.Store { // testenv's, with its commands counted
		client := testenv.Redis(t)
		commands = new(commandCounter)
		client.AddHook(commands)
		s, err := redisstore.New(client, &redisstore.Options{Prefix: testenv.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			commands = nil
			var calls storeCalls
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
			srv := serve(t, newMiddleware(t, newEngine(t, newStore(t), &idem.Options{Observer: &calls}), nil)(h))
			call{key: "warm-up"}.send(t, srv) // loads the Lua scripts into Redis
			calls.take()
			if commands != nil {
				commands.n.Store(0)
			}
			for _, c := range []struct {
				name     string
				want     [3]int64 // acquire, complete, other
				commands int64
			}{
				{"first request", [3]int64{1, 1, 0}, 2},
				{"replay", [3]int64{1, 0, 0}, 1},
			} {
				if r := (call{key: "k"}).send(t, srv); r.status != 200 {
					t.Fatalf("%s: status %d", c.name, r.status)
				}
				if got := calls.take(); got != c.want {
					t.Errorf("%s: store calls (acquire, complete, other) %v, want %v", c.name, got, c.want)
				}
				if commands != nil {
					if got := commands.n.Swap(0); got != c.commands {
						t.Errorf("%s: %d Redis commands, want %d", c.name, got, c.commands)
					}
				}
			}
		})
	}
}
