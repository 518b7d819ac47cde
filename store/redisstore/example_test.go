package redisstore_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// redisURL is the Redis server of the examples: IDEM_TEST_REDIS_URL, or
// the local one that scripts/test.sh starts.
func redisURL() string {
	if u := os.Getenv("IDEM_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// removeKeys deletes the keys under prefix that an example wrote.
func removeKeys(ctx context.Context, client redis.UniversalClient, prefix string) {
	iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		client.Del(ctx, iter.Val())
	}
}

// The engine on Redis: every instance of a service that shares the Redis
// server shares the keys. Two deliveries of one message run the work once.
// (Without a reachable Redis the store fails closed: Do returns an error
// wrapping idem.ErrStore and the work does not run.)
func ExampleNew() {
	ctx := context.Background()
	client, err := redisstore.ParseURL(redisURL()) // also redis-sentinel:// and redis-cluster:// URLs
	if err != nil {
		panic(err)
	}
	defer client.Close()
	prefix := "idem-example:" + rand.Text()[:8] + ":" // zero means "idem:"
	defer removeKeys(ctx, client, prefix)

	store, err := redisstore.New(client, &redisstore.Options{Prefix: prefix})
	if err != nil {
		panic(err)
	}
	engine, err := idem.New(store, nil)
	if err != nil {
		panic(err)
	}
	sent := 0
	sendInvoice := func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
		sent++
		return []byte("invoice INV-1 sent"), nil
	}
	msg := idem.Request{Tenant: "acme", Key: "invoice-INV-1", NoFingerprint: true}
	for range 2 {
		out, replayed, err := engine.Do(ctx, msg, sendInvoice)
		fmt.Printf("%s replayed=%t err=%v\n", out, replayed, err)
	}
	fmt.Println("sent:", sent)
	// Output:
	// invoice INV-1 sent replayed=false err=<nil>
	// invoice INV-1 sent replayed=true err=<nil>
	// sent: 1
}

// A store whose replays come from process memory: ?near_cache=on opens a
// rueidis client with client-side caching. The first delivery runs the
// work; the second replays it with one round trip (a cached read of the
// record, in place of the acquire script), which fills the cache; the
// third replays with no round trip at all.
func ExampleOpenURL() {
	ctx := context.Background()
	prefix := "idem-example:" + rand.Text()[:8] + ":"
	store, err := redisstore.OpenURL(redisURL()+"?near_cache=on", &redisstore.Options{Prefix: prefix})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	cleanup, _ := redisstore.ParseURL(redisURL())
	defer cleanup.Close()
	defer removeKeys(ctx, cleanup, prefix)

	engine, err := idem.New(store, nil)
	if err != nil {
		panic(err)
	}
	msg := idem.Request{Tenant: "acme", Key: "invoice-INV-2", NoFingerprint: true}
	for range 3 {
		out, replayed, err := engine.Do(ctx, msg, func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
			return []byte("invoice INV-2 sent"), nil
		})
		fmt.Printf("%s replayed=%t err=%v\n", out, replayed, err)
	}
	stats, on := store.NearCacheStats()
	fmt.Printf("near cache on=%t hits=%d misses=%d\n", on, stats.Hits, stats.Misses)
	// Output:
	// invoice INV-2 sent replayed=false err=<nil>
	// invoice INV-2 sent replayed=true err=<nil>
	// invoice INV-2 sent replayed=true err=<nil>
	// near cache on=true hits=1 misses=1
}
