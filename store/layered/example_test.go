package layered_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/layered"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/redisstore"
)

// redisURL and databaseURL are the servers of the examples: the
// IDEM_TEST_REDIS_URL and IDEM_TEST_DATABASE_URL variables, or the local
// ones that scripts/test.sh starts.
func redisURL() string { return env("IDEM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0") }
func databaseURL() string {
	return env("IDEM_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// removeKeys deletes the Redis keys under prefix: here, Redis forgetting
// the mirror as a flush, an eviction or a failover would.
func removeKeys(ctx context.Context, client redis.UniversalClient, prefix string) {
	iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		client.Del(ctx, iter.Val())
	}
}

// mirrored counts the keys of the mirror under prefix; -1 if Redis does
// not answer.
func mirrored(ctx context.Context, client redis.UniversalClient, prefix string) int {
	n := 0
	iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		n++
	}
	if iter.Err() != nil {
		return -1
	}
	return n
}

// Redis in front of PostgreSQL: PostgreSQL grants every lease and keeps
// every result; Redis mirrors them and answers replays. When Redis forgets
// a key, the next attempt reads PostgreSQL, is replayed all the same and
// warms the mirror again: the work never runs twice on Redis's word.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	schema := "idem_example_" + strings.ToLower(rand.Text()[:8])
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		panic(err)
	}
	defer pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	authority, err := pgstore.New(pool, &pgstore.Options{Schema: schema})
	if err != nil {
		panic(err)
	}
	defer authority.Close() // stops its reaper of expired rows

	client, err := redisstore.ParseURL(redisURL())
	if err != nil {
		panic(err)
	}
	defer client.Close()
	prefix := "idem-example:" + rand.Text()[:8] + ":" // zero means "idem:mirror:"
	defer removeKeys(ctx, client, prefix)

	store, err := layered.New(client, authority, &layered.Options{Prefix: prefix})
	if err != nil {
		panic(err)
	}
	engine, err := idem.New(store, nil)
	if err != nil {
		panic(err)
	}
	refunds := 0
	refund := func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
		refunds++
		return []byte("refund re_1"), nil
	}
	req := idem.Request{Tenant: "acme", Key: "refund-order-42", Fingerprint: "POST /refunds order=42"}
	do := func(when string) {
		out, replayed, err := engine.Do(ctx, req, refund)
		fmt.Printf("%s: %s replayed=%t err=%v; mirrored keys: %d\n", when, out, replayed, err, mirrored(ctx, client, prefix))
	}
	do("first")
	do("retry")
	removeKeys(ctx, client, prefix) // Redis loses the mirror
	do("retry after Redis forgot")
	fmt.Println("refunds:", refunds)
	// Output:
	// first: refund re_1 replayed=false err=<nil>; mirrored keys: 1
	// retry: refund re_1 replayed=true err=<nil>; mirrored keys: 1
	// retry after Redis forgot: refund re_1 replayed=true err=<nil>; mirrored keys: 1
	// refunds: 1
}
