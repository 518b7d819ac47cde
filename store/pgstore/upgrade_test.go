package pgstore_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgstore"
)

// olderRead is what the release before 009_unsettled.sql reads of every row
// (its recordColumns: the lease left, the life left) and its liveness test.
// It must not fail on a row this version wrote: older instances still serve
// while a rolling upgrade runs.
const olderRead = `SELECT idempotency_key,
	(extract(epoch FROM coalesce(lease_until, expires_at) - clock_timestamp()) * 1000000)::bigint,
	(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint,
	expires_at > clock_timestamp()
	FROM %s.records WHERE state IN ('P', 'U')`

// checkOlderRead runs olderRead over the P and U rows of schema: no error,
// each row live for the older version, and its life left a time.Duration
// the older version's Go code can hold (microseconds times 1000 in an int64).
func checkOlderRead(t *testing.T, pool *pgxpool.Pool, schema string, want int) {
	t.Helper()
	rows, err := pool.Query(context.Background(), fmt.Sprintf(olderRead, schema))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var key string
		var lease, life int64
		var live bool
		if err := rows.Scan(&key, &lease, &life, &live); err != nil {
			t.Fatal(err)
		}
		if !live || life <= 0 || life > math.MaxInt64/int64(time.Microsecond) {
			t.Errorf("%s: an older version reads live %v, life %d µs; want live, a life in (0, %d] µs", key, live, life, math.MaxInt64/int64(time.Microsecond))
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("an older version's read of the rows this version wrote: %v; want no error", err)
	}
	if n != want {
		t.Fatalf("%d P and U rows; want %d", n, want)
	}
}

// The rows this version writes for PROCESSING and UNKNOWN keys (acquired,
// extended, marked UNKNOWN, abandoned, claimed) are read without error by
// the version before, which still serves during a rolling upgrade, and are
// live for it: their end is finite (PostgreSQL refuses to subtract from
// infinity) and far ahead.
func TestOlderVersionReadsUnsettledRows(t *testing.T) {
	pool, schema := testenv.Postgres(t)
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, &pgstore.Options{Schema: schema, ReapInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acquire := func(key string, lease time.Duration) store.LeaseRef {
		id := store.ID{Tenant: "t", Key: key}
		res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", Fingerprint: "fp", LeaseDuration: lease, Retention: time.Hour})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v", key, res, err)
		}
		return store.LeaseRef{ID: id, Owner: "o", Fence: res.Record.Fence}
	}
	p := acquire("p", time.Minute)
	if err := s.Extend(ctx, store.ExtendParams{LeaseRef: p, LeaseDuration: time.Minute, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	u := acquire("u", time.Minute)
	if err := s.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: u, Reason: "timeout", Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	a := acquire("abandoned", time.Millisecond)
	endLease(t, pool, schema, a.ID.Key)
	if res, err := s.Acquire(ctx, store.AcquireParams{ID: a.ID, Owner: "o2", Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Hour}); err != nil || res.Acquired {
		t.Fatalf("Acquire of an abandoned key = %+v, %v; want not acquired (turned UNKNOWN)", res, err)
	}
	c := acquire("claimed", time.Millisecond)
	endLease(t, pool, schema, c.ID.Key)
	if res, err := s.Claim(ctx, store.ClaimParams{ID: c.ID, Owner: "rec", LeaseDuration: time.Minute}); err != nil || !res.Claimed {
		t.Fatalf("Claim = %+v, %v; want claimed", res, err)
	}
	checkOlderRead(t, pool, schema, 4)
}

// endLease ends the lease of key's row, as time would.
func endLease(t *testing.T, pool *pgxpool.Pool, schema, key string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), fmt.Sprintf(`UPDATE %s.records SET lease_until = clock_timestamp() - interval '1 second' WHERE idempotency_key = $1`, schema), key); err != nil {
		t.Fatal(err)
	}
}

// A P row the version before wrote while a rolling upgrade runs carries a
// finite end (its acquisition, lease and retention). Once that end passes,
// its owner may have crashed mid-work: the key is UNKNOWN abandoned, never
// absent, and never taken by an acquisition, listed and claimable, and its
// owner's late Complete still lands.
func TestOlderVersionsProcessingRowOutlivesItsEnd(t *testing.T) {
	pool, schema := testenv.Postgres(t)
	ctx := context.Background()
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, &pgstore.Options{Schema: schema, ReapInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// As the older version's acquire.sql writes it (no retentions), a day ago.
	if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s.records
		(tenant_id, idempotency_key, state, owner, fence, fingerprint, acquired_at, lease_until, expires_at, reap_at)
		VALUES ('t', 'k', 'P', 'old', nextval('%[1]s.fence_seq'), 'fp', now() - interval '25 hours', now() - interval '25 hours' + interval '1 minute',
			now() - interval '1 hour', now() - interval '1 hour'),
		       ('t', 'k2', 'P', 'old', nextval('%[1]s.fence_seq'), 'fp', now() - interval '25 hours', now() - interval '25 hours' + interval '1 minute',
			now() - interval '1 hour', now() - interval '1 hour')`, schema)); err != nil {
		t.Fatal(err)
	}
	id := store.ID{Tenant: "t", Key: "k"}
	rec, err := s.Get(ctx, id)
	if err != nil || rec.State != store.StateUnknown || rec.Reason != store.ReasonAbandoned || rec.Owner != "old" {
		t.Fatalf("Get = %+v, %v; want UNKNOWN abandoned, the older instance's", rec, err)
	}
	for _, takeOver := range []bool{false, true} {
		res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "new", Fingerprint: "fp2", LeaseDuration: time.Minute, Retention: time.Hour, TakeOver: takeOver})
		if err != nil || res.Acquired || res.Record.State != store.StateUnknown || res.Record.Fence != rec.Fence {
			t.Fatalf("Acquire(TakeOver %v) = %+v, %v; want not acquired, the UNKNOWN record", takeOver, res, err)
		}
	}
	if _, err := s.Reap(ctx, 10); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListUnknown(ctx, store.ListParams{Tenant: "t", Limit: 10})
	if err != nil || len(page.Records) != 2 {
		t.Fatalf("ListUnknown = %+v, %v; want both keys", page, err)
	}
	if res, err := s.Claim(ctx, store.ClaimParams{ID: store.ID{Tenant: "t", Key: "k2"}, Owner: "rec", LeaseDuration: time.Minute}); err != nil || !res.Claimed {
		t.Fatalf("Claim = %+v, %v; want claimed", res, err)
	}
	ref := store.LeaseRef{ID: id, Owner: "old", Fence: rec.Fence}
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 201}, Retention: time.Hour}); err != nil {
		t.Fatalf("the older instance's late Complete = %v; want nil", err)
	}
	if rec, err := s.Get(ctx, id); err != nil || rec.State != store.StateCompleted {
		t.Fatalf("Get after Complete = %+v, %v; want COMPLETED", rec, err)
	}
}
