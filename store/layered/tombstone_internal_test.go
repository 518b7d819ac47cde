package layered

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgstore"
)

// A reader that fetched a record from PostgreSQL just before an admin
// Delete (or a Release) must not write it back into the mirror afterwards:
// the key would replay (or answer 409) though PostgreSQL no longer has it.
func TestStaleWriteBackAfterDeleteOrRelease(t *testing.T) {
	ctx := context.Background()
	pool, schema := testenv.Postgres(t)
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	pg, err := pgstore.New(pool, &pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	s, err := New(testenv.Redis(t), pg, &Options{Prefix: testenv.Prefix(t), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	acquire := func(key string) store.LeaseRef {
		res, err := s.Acquire(ctx, store.AcquireParams{ID: store.ID{Key: key}, Owner: "owner-" + key, LeaseDuration: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v", key, res, err)
		}
		return store.LeaseRef{ID: res.Record.ID, Owner: res.Record.Owner, Fence: res.Record.Fence}
	}

	done := acquire("deleted")
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: done, Result: store.Result{Status: 201}, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	stale, err := pg.Get(ctx, done.ID) // a reader fetches the record...
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, store.DeleteParams{ID: done.ID}); err != nil { // ...an operator deletes the key...
		t.Fatal(err)
	}
	s.mirror(ctx, stale) // ...and the reader writes its copy back
	if rec, err := s.Get(ctx, done.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after Delete and a stale write-back, Get = %+v, %v; want ErrNotFound", rec, err)
	}

	held := acquire("released")
	stale, err = pg.Get(ctx, held.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	s.mirror(ctx, stale)
	res, err := s.Acquire(ctx, store.AcquireParams{ID: held.ID, Owner: "next", LeaseDuration: time.Minute})
	if err != nil || !res.Acquired || res.Record.Fence <= held.Fence {
		t.Fatalf("after Release and a stale write-back, Acquire = %+v, %v; want a new lease with a higher fence", res, err)
	}
	// The new lease is mirrored above the tombstone.
	if rec, err := s.Get(ctx, held.ID); err != nil || rec.Owner != "next" {
		t.Fatalf("Get after the new acquisition = %+v, %v; want the new owner's record", rec, err)
	}
}
