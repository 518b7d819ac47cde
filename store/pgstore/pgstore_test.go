package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/storetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStore returns a store in a schema of its own, migrated.
func newStore(t testing.TB) *pgstore.Store {
	t.Helper()
	pool, schema := testenv.Postgres(t)
	if err := pgstore.Migrate(context.Background(), pool, schema); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, &pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	s := newStore(t) // one schema for the suite: each case uses its own keys
	storetest.Run(t, storetest.Harness{
		New:     func(t *testing.T) idem.Store { return s },
		Advance: func(t *testing.T, d time.Duration) { time.Sleep(d) }, // the database keeps real time
	})
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	pool, schema := testenv.Postgres(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = pgstore.Migrate(context.Background(), pool, schema) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Migrate: %v", err)
	}
	if err := pgstore.Migrate(context.Background(), pool, schema); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("%d migrations recorded; want 2, each once", n)
	}
}

func TestBadOptions(t *testing.T) {
	pool, _ := testenv.Postgres(t)
	for _, schema := range []string{"Idem", "a-b", "x;DROP TABLE y", "1abc"} {
		if _, err := pgstore.New(pool, &pgstore.Options{Schema: schema}); !errors.Is(err, pgstore.ErrConfig) {
			t.Errorf("New(schema %q) = %v; want ErrConfig", schema, err)
		}
		if err := pgstore.Migrate(context.Background(), pool, schema); !errors.Is(err, pgstore.ErrConfig) {
			t.Errorf("Migrate(schema %q) = %v; want ErrConfig", schema, err)
		}
	}
	if _, err := pgstore.New(nil, nil); !errors.Is(err, pgstore.ErrConfig) {
		t.Errorf("New(nil pool) = %v; want ErrConfig", err)
	}
	if _, err := newStore(t).Reap(context.Background(), 0); !errors.Is(err, pgstore.ErrConfig) {
		t.Errorf("Reap(0) = %v; want ErrConfig", err)
	}
}

// TestReapConcurrent expires many rows and reaps them with several reapers
// at once: every expired row is deleted exactly once, live rows stay.
func TestReapConcurrent(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const expired, live, batch = 300, 20, 25
	for i := range expired + live {
		lease := 20 * time.Millisecond
		if i >= expired {
			lease = time.Hour
		}
		res, err := s.Acquire(ctx, idem.AcquireParams{ID: idem.ID{Tenant: "t", Key: fmt.Sprint("k", i)}, Owner: fmt.Sprint("o", i), Lease: lease})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire %d: %v %+v", i, err, res)
		}
	}
	time.Sleep(50 * time.Millisecond)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
	)
	for range 4 {
		wg.Go(func() {
			for {
				n, err := s.Reap(ctx, batch)
				if err != nil {
					t.Error(err)
					return
				}
				if n > batch {
					t.Errorf("Reap(%d) deleted %d rows", batch, n)
				}
				mu.Lock()
				total += n
				mu.Unlock()
				if n == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	if total != expired {
		t.Fatalf("reapers deleted %d rows; want the %d expired ones", total, expired)
	}
	var rows int
	if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM "+s.Schema()+".records").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != live {
		t.Fatalf("%d rows left; want the %d live ones", rows, live)
	}
}
