package natsconsumer

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" { // a consumer process of the SIGKILL fault
		os.Exit(runChild())
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// The servers: IDEM_TEST_NATS_URL, IDEM_TEST_REDIS_URL and
// IDEM_TEST_DATABASE_URL, or the local ones scripts/services.sh starts.
func natsURL() string  { return env("IDEM_TEST_NATS_URL", "nats://127.0.0.1:4222") }
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

// unavailable skips t when a server is down, or fails it under CI.
func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is unreachable (%v); CI=true needs it: run scripts/test.sh, which starts it", what, err)
	}
	t.Skipf("%s is unreachable (%v); run scripts/services.sh to start it", what, err)
}

// unique returns a name no other run shares: lower-case letters and digits.
func unique(prefix string) string { return prefix + strings.ToLower(rand.Text()[:10]) }

// site is where one test's consumers run: the schema of its ledger and the
// Redis prefix of its idem records, both removed at the end.
type site struct {
	schema, prefix string
}

func newSite(t *testing.T) site {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(natsURL(), nats.Timeout(5*time.Second))
	if err != nil {
		unavailable(t, "NATS at "+natsURL(), err)
	}
	js, err := jetstream.New(nc)
	if err == nil {
		_, err = js.AccountInfo(ctx)
	}
	nc.Close()
	if err != nil {
		unavailable(t, "JetStream at "+natsURL()+" (start nats-server with -js)", err)
	}
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	if err := rc.Ping(ctx).Err(); err != nil {
		unavailable(t, "Redis at "+redisURL(), err)
	}
	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		unavailable(t, "PostgreSQL at "+databaseURL(), err)
	}
	s := site{schema: unique("natsconsumer_"), prefix: unique("natsconsumer:") + ":"}
	if _, err := OpenLedger(ctx, pool, s.schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, databaseURL())
		if err == nil {
			pool.Exec(ctx, `DROP SCHEMA `+s.schema+` CASCADE`)
			pool.Close()
		}
		rc := redis.NewClient(opt)
		defer rc.Close()
		iter := rc.Scan(ctx, 0, s.prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			rc.Del(ctx, iter.Val())
		}
	})
	return s
}

// consumerConfig is what a consumer process needs to know.
type consumerConfig struct {
	site
	tenant, stream, durable string
	lease                   time.Duration
	retryDelay              time.Duration
	orderKey                bool // key by OrderKey instead of MessageKey
	// unguarded: idem on Redis alone, the baseline. The charge is made
	// without the guardrail's reservation, and a key whose owner's lease
	// ended is run again (TakeoverRun), as a consumer that must not leave
	// messages unacknowledged would do without a ledger to ask.
	unguarded bool
}

// running is one consumer with its own connections to every server, as a
// separate process of the service would have.
type running struct {
	nc       *nats.Conn
	rc       *redis.Client
	pool     *pgxpool.Pool
	ledger   *Ledger
	consumer *Consumer
	cc       jetstream.ConsumeContext
	handlers chan struct{} // one token per running handler
	cancel   context.CancelFunc
}

// startConsumer connects and consumes from the durable; each delivery is
// handled in its own goroutine, as a worker pool would, so that a
// redelivery meets the first delivery still running. tweak may set hooks.
func startConsumer(ctx context.Context, c consumerConfig, tweak func(*Config, *Ledger)) (*running, error) {
	r := &running{handlers: make(chan struct{}, 64)}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	var err error
	if r.nc, err = nats.Connect(natsURL(), nats.Timeout(5*time.Second)); err != nil {
		return nil, err
	}
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		return nil, err
	}
	opt.ContextTimeoutEnabled = true
	r.rc = redis.NewClient(opt)
	if r.pool, err = pgxpool.New(ctx, databaseURL()); err != nil {
		return nil, err
	}
	if r.ledger, err = OpenLedger(ctx, r.pool, c.schema); err != nil {
		return nil, err
	}
	store, err := redisstore.New(r.rc, &redisstore.Options{Prefix: c.prefix})
	if err != nil {
		return nil, err
	}
	opts := &idem.Options{LeaseDuration: c.lease, Reconcile: r.ledger.Reconcile}
	if c.unguarded {
		r.ledger.unguarded = true
		opts = &idem.Options{LeaseDuration: c.lease, Takeover: idem.TakeoverRun}
	}
	engine, err := idem.New(store, opts)
	if err != nil {
		return nil, err
	}
	cfg := Config{Engine: engine, Ledger: r.ledger, Tenant: c.tenant, RetryDelay: c.retryDelay}
	if c.orderKey {
		cfg.Key = OrderKey
	}
	if tweak != nil {
		tweak(&cfg, r.ledger)
	}
	if r.consumer, err = New(cfg); err != nil {
		return nil, err
	}
	js, err := jetstream.New(r.nc)
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, c.stream, c.durable)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.cc, err = cons.Consume(func(msg jetstream.Msg) {
		r.handlers <- struct{}{}
		go func() {
			defer func() { <-r.handlers }()
			r.consumer.Handle(hctx, msg)
		}()
	})
	if err != nil {
		return nil, err
	}
	ok = true
	return r, nil
}

// close stops consuming, waits for the running handlers, and closes the
// connections.
func (r *running) close() {
	if r.cc != nil {
		r.cc.Stop()
		<-r.cc.Closed()
	}
	if r.cancel != nil {
		r.cancel()
	}
	for range cap(r.handlers) {
		r.handlers <- struct{}{}
	}
	if r.nc != nil {
		r.nc.Close()
	}
	if r.rc != nil {
		r.rc.Close()
	}
	if r.pool != nil {
		r.pool.Close()
	}
}
