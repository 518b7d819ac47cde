package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/redisstore"
)

// TestFencesComparableAcrossStores is issue 22's item 18: a team that
// wrote fenced rows and reservations with the fences of the memory or the
// Redis store moves to PostgreSQL. The new store's fences must be above
// the old ones, or every fenced write is refused as stale.
func TestFencesComparableAcrossStores(t *testing.T) {
	ctx := context.Background()
	mem, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	redis, err := redisstore.New(testenv.Redis(t), &redisstore.Options{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t)
	db := s.Pool()
	if _, err := db.Exec(ctx, `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, fence bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for name, old := range map[string]store.Store{"memory": mem, "redis": redis} {
		id := store.ID{Tenant: "acme", Key: "moved-from-" + name}
		before := acquireFence(t, old, id)
		// The old store's lease wrote the account and reserved the key.
		tx, err := db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO accounts VALUES ($1, 100, $2) ON CONFLICT (id) DO UPDATE SET fence = $2`, 1, before); err != nil {
			t.Fatal(err)
		}
		if err := s.Reserve(ctx, tx, id.Tenant, id.Key, before); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		// The team moved to PostgreSQL; the key's next lease comes from it.
		after := acquireFence(t, s, id)
		if after <= before {
			t.Fatalf("PostgreSQL fence %d after the %s store's %d; want it above", after, name, before)
		}
		tx, err = db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := pgstore.FencedExec(ctx, tx, `UPDATE accounts SET balance = balance - 10, fence = $1 WHERE id = 1 AND fence <= $1`, after); err != nil {
			t.Fatalf("fenced write with PostgreSQL's fence over the %s store's = %v", name, err)
		}
		if err := s.Settle(ctx, tx, id.Tenant, id.Key, after, []byte("charged")); err != nil {
			t.Fatalf("Settle with PostgreSQL's fence of a reservation made with the %s store's = %v", name, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// acquireFence acquires id in s for a minute and returns the lease's fence.
func acquireFence(t *testing.T, s store.Store, id store.ID) int64 {
	t.Helper()
	res, err := s.Acquire(context.Background(), store.AcquireParams{ID: id, Owner: fmt.Sprint("owner-", time.Now().UnixNano()),
		Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire(%v) = %+v, %v; want acquired", id, res, err)
	}
	return res.Record.Fence
}

// TestFenceSequenceOnlyGoesUp: the sequence is floored by the clock (a
// database upgraded from an older release has it far below), and never
// set back: a sequence ahead of the clock (the clock stepped back, or an
// operator set it) keeps counting from where it is.
func TestFenceSequenceOnlyGoesUp(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	seq := s.Schema() + ".fence_seq"
	setSeq := func(v int64) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, `SELECT setval($1::regclass, $2)`, seq, v); err != nil {
			t.Fatal(err)
		}
	}
	setSeq(73) // as an older release left it
	clock := time.Now().UnixMicro()
	if f := acquireFence(t, s, store.ID{Tenant: "t", Key: "behind"}); f < clock {
		t.Fatalf("fence %d with the sequence at 73; want at least the clock, %d", f, clock)
	}
	ahead := time.Now().Add(time.Hour).UnixMicro()
	setSeq(ahead)
	if f := acquireFence(t, s, store.ID{Tenant: "t", Key: "ahead"}); f != ahead+1 {
		t.Fatalf("fence %d with the sequence an hour ahead at %d; want %d, the next value", f, ahead, ahead+1)
	}
}

// TestFencesUniqueUnderConcurrency: goroutines acquiring keys at once for
// longer than the sequence's lead over the clock (so that several of them
// move the sequence up while the others take values) never get the same
// fence, and each fence is at least its acquisition time.
func TestFencesUniqueUnderConcurrency(t *testing.T) {
	s := newStore(t)
	const workers, each = 8, 60
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		fences = map[int64]store.ID{}
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id := store.ID{Tenant: "t", Key: fmt.Sprint(w, "-", i)}
				res, err := s.Acquire(context.Background(), store.AcquireParams{ID: id, Owner: "o", LeaseDuration: time.Minute, Retention: time.Minute})
				if err != nil || !res.Acquired {
					t.Errorf("Acquire(%v) = %+v, %v", id, res, err)
					return
				}
				mu.Lock()
				other, dup := fences[res.Record.Fence]
				fences[res.Record.Fence] = id
				mu.Unlock()
				if dup {
					t.Errorf("fence %d given to %v and %v", res.Record.Fence, other, id)
				}
				if res.Record.Fence < res.Record.AcquiredAt.UnixMicro() {
					t.Errorf("fence %d below its acquisition time %v", res.Record.Fence, res.Record.AcquiredAt)
				}
			}
		})
	}
	wg.Wait()
}
