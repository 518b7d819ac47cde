package natsconsumer_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/examples/natsconsumer"
	"github.com/idemkit/idem/store/redisstore"
)

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// A publisher that retried with a fresh message ID stored one order twice;
// the consumer, keyed by the order (OrderKey), charges it once and acks
// both. (The servers are the ones scripts/services.sh starts.)
func Example() {
	ctx := context.Background()
	id := strings.ToLower(rand.Text()[:8]) // names of this run only

	// idem on Redis, the ledger and its guardrail on PostgreSQL.
	opt, _ := redis.ParseURL(getenv("IDEM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"))
	opt.ContextTimeoutEnabled = true // the engine bounds every store call
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	pool, err := pgxpool.New(ctx, getenv("IDEM_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	ledger, err := natsconsumer.OpenLedger(ctx, pool, "natsexample_"+id)
	if err != nil {
		panic(err)
	}
	defer pool.Exec(ctx, "DROP SCHEMA natsexample_"+id+" CASCADE")
	store, _ := redisstore.New(rdb, &redisstore.Options{Prefix: "natsexample:" + id + ":"})
	defer func() {
		keys, _ := rdb.Keys(ctx, "natsexample:"+id+":*").Result()
		rdb.Del(ctx, keys...)
	}()
	engine, _ := idem.New(store, &idem.Options{Reconcile: ledger.Reconcile})
	consumer, err := natsconsumer.New(natsconsumer.Config{
		Engine: engine, Ledger: ledger, Tenant: "billing", Key: natsconsumer.OrderKey})
	if err != nil {
		panic(err)
	}

	// A stream, a durable consumer, and the order published twice.
	nc, err := nats.Connect(getenv("IDEM_TEST_NATS_URL", nats.DefaultURL))
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	stream := "NATSEXAMPLE_" + strings.ToUpper(id)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".orders"}}); err != nil {
		panic(err)
	}
	defer js.DeleteStream(ctx, stream)
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "charger", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	for _, msgID := range []string{"try-1", "try-2"} {
		js.Publish(ctx, stream+".orders", []byte(`{"id":"42","amount":1999}`), jetstream.WithMsgID(msgID))
	}

	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		panic(err)
	}
	for msg := range batch.Messages() {
		d := consumer.Handle(ctx, msg)
		fmt.Println(d.Seq, d.Key, d.Outcome, "acked:", d.Acked)
	}
	charges, _ := ledger.Charges(ctx, "billing")
	fmt.Println("charges:", charges)
	// Output:
	// 1 order/42 charged acked: true
	// 2 order/42 replayed acked: true
	// charges: map[order/42:1]
}
