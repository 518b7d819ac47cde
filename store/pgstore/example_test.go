package pgstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
	pool, err := pgxpool.New(ctx, testenv.DatabaseURL())
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	schema := "idem_example_" + strings.ToLower(rand.Text()[:8])
	if err := pgstore.Migrate(ctx, pool, schema); err != nil {
		panic(err)
	}
	defer pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")

	store, err := pgstore.New(pool, &pgstore.Options{Schema: schema})
	if err != nil {
		panic(err)
	}
	engine, err := idem.New(store, nil)
	if err != nil {
		panic(err)
	}
	prov := newProvider()
	pay := func(key string) {
		req := idem.Request{Tenant: "acme", Key: key, Fingerprint: "POST /payments amount=4200"}
		out, replayed, err := engine.Do(ctx, req, func(ctx context.Context, fence int64) ([]byte, error) {
			return chargeOnce(ctx, pool, store, prov, req.Tenant, req.Key, fence)
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
