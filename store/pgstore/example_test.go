package pgstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
)

// databaseURL is the PostgreSQL database of the examples:
// IDEM_TEST_DATABASE_URL, or the local one that scripts/test.sh starts.
func databaseURL() string {
	if u := os.Getenv("IDEM_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// The engine on PostgreSQL: Migrate creates the store's tables (the
// `idem migrate` command runs it too), New opens the store on them and
// starts its reaper of expired rows, which Close stops. A record survives
// a restart, and a fence is never handed out twice.
// (Without a reachable database the example stops at Migrate.)
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	schema := "idem_example_" + strings.ToLower(rand.Text()[:8]) // empty means "idem"
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		panic(err)
	}
	defer pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")

	store, err := pgstore.New(pool, &pgstore.Options{Schema: schema})
	if err != nil {
		panic(err)
	}
	defer store.Close() // stops its reaper of expired rows
	engine, err := idem.New(store, nil)
	if err != nil {
		panic(err)
	}
	provisioned := 0
	provision := func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
		provisioned++
		return []byte("vm-1 running"), nil
	}
	req := idem.Request{Tenant: "acme", Key: "create-vm-1", Fingerprint: "POST /vms size=small"}
	for range 2 {
		out, replayed, err := engine.Do(ctx, req, provision)
		fmt.Printf("%s replayed=%t err=%v\n", out, replayed, err)
	}
	fmt.Println("provisioned:", provisioned)
	// Output:
	// vm-1 running replayed=false err=<nil>
	// vm-1 running replayed=true err=<nil>
	// provisioned: 1
}

// provider is a fake payment provider that, like Stripe, answers a retried
// idempotency key with the charge it already made. It counts the calls it
// got and the charges it made.
type provider struct {
	mu      sync.Mutex
	calls   int
	charges map[string]string // idempotency key -> charge id
}

func newProvider() *provider { return &provider{charges: map[string]string{}} }

// Charge charges amount once per idempotency key.
func (p *provider) Charge(_ context.Context, idempotencyKey string, amount int) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if id, ok := p.charges[idempotencyKey]; ok {
		return id, nil
	}
	id := fmt.Sprintf("ch_%d_%d", len(p.charges)+1, amount)
	p.charges[idempotencyKey] = id
	return id, nil
}

func (p *provider) counts() (calls, charges int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls, len(p.charges)
}

// chargeOnce is the article's flow, run by the worker that holds the lease
// with the given fence: reserve the key in a transaction on pool (the one
// the store runs on), call the provider
// with the key forwarded, record the outcome, commit.
func chargeOnce(ctx context.Context, pool *pgxpool.Pool, store *pgstore.Store, prov *provider, tenant, key string, fence int64) ([]byte, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // a no-op after Commit; undoes the reservation on failure
	err = store.Reserve(ctx, tx, tenant, key, fence)
	if errors.Is(err, pgstore.ErrDuplicate) {
		// Another worker did the work and committed, but did not get to
		// complete the idem record: its recorded outcome is the result.
		tx.Rollback(ctx)
		r, err := store.Reservation(ctx, pool, tenant, key)
		if err != nil {
			return nil, err
		}
		return r.Outcome, nil
	}
	if err != nil {
		return nil, err
	}
	chargeID, err := prov.Charge(ctx, tenant+"/"+key, 4200) // the key goes to the provider too
	if err != nil {
		return nil, err
	}
	if err := store.Settle(ctx, tx, tenant, key, fence, []byte(chargeID)); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return []byte(chargeID), nil
}

// Example_articleFlow runs one payment twice through the engine on the
// PostgreSQL store: the work runs once, the retry gets the stored result.
func Example_articleFlow() {
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

	store, err := pgstore.New(pool, &pgstore.Options{Schema: schema})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	engine, err := idem.New(store, nil)
	if err != nil {
		panic(err)
	}
	prov := newProvider()
	pay := func(key string) {
		req := idem.Request{Tenant: "acme", Key: key, Fingerprint: "POST /payments amount=4200"}
		out, replayed, err := engine.Do(ctx, req, func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
			return chargeOnce(ctx, pool, store, prov, req.Tenant, req.Key, lease.Fence())
		})
		fmt.Printf("%s replayed=%v err=%v\n", out, replayed, err)
	}
	pay("order-42")
	pay("order-42") // the client's retry
	calls, charges := prov.counts()
	fmt.Printf("provider calls=%d charges=%d\n", calls, charges)
	// Output:
	// ch_1_4200 replayed=false err=<nil>
	// ch_1_4200 replayed=true err=<nil>
	// provider calls=1 charges=1
}
