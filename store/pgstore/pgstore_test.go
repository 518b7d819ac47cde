package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStore returns a store in a schema of its own, migrated, with its
// reaper on (closed when t ends).
func newStore(t testing.TB) *pgstore.Store {
	t.Helper()
	return newStoreOpts(t, nil)
}

// newStoreOpts is newStore with opts, whose Schema it sets.
func newStoreOpts(t testing.TB, opts *pgstore.Options) *pgstore.Store {
	t.Helper()
	pool, schema := testenv.Postgres(t)
	if err := pgstore.Migrate(context.Background(), pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	o := pgstore.Options{}
	if opts != nil {
		o = *opts
	}
	o.Schema = schema
	s, err := pgstore.New(pool, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	s := newStore(t) // one schema for the suite: each case uses its own keys
	storetest.Run(t, storetest.Harness{
		// The database keeps real time.
		New: func(t *testing.T) (store.Store, func(time.Duration)) { return s, storetest.Sleep },
	})
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	pool, schema := testenv.Postgres(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = pgstore.Migrate(context.Background(), pool, &pgstore.Options{Schema: schema}) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Migrate: %v", err)
	}
	if err := pgstore.Migrate(context.Background(), pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 9 {
		t.Fatalf("%d migrations recorded; want 9, each once", n)
	}
}

func TestBadOptions(t *testing.T) {
	pool, _ := testenv.Postgres(t)
	for _, schema := range []string{"Idem", "a-b", "x;DROP TABLE y", "1abc"} {
		if _, err := pgstore.New(pool, &pgstore.Options{Schema: schema}); !errors.Is(err, pgstore.ErrConfig) {
			t.Errorf("New(schema %q) = %v; want ErrConfig", schema, err)
		}
		if err := pgstore.Migrate(context.Background(), pool, &pgstore.Options{Schema: schema}); !errors.Is(err, pgstore.ErrConfig) {
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
// at once: every expired row is deleted exactly once, live rows stay, and
// so do abandoned ones (their leases ended, never settled), moved ahead.
func TestReapConcurrent(t *testing.T) {
	s := newStoreOpts(t, &pgstore.Options{ReapInterval: -1}) // these tests count what Reap does
	ctx := context.Background()
	const expired, abandoned, live, batch = 300, 10, 20, 25
	for i := range expired + abandoned + live {
		lease := 20 * time.Millisecond
		if i >= expired+abandoned {
			lease = time.Hour
		}
		res, err := s.Acquire(ctx, store.AcquireParams{ID: store.ID{Tenant: "t", Key: fmt.Sprint("k", i)}, Owner: fmt.Sprint("o", i), LeaseDuration: lease})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire %d: %v %+v", i, err, res)
		}
		if i < expired {
			ref := store.LeaseRef{ID: res.Record.ID, Owner: res.Record.Owner, Fence: res.Record.Fence}
			if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 200}, Retention: time.Millisecond}); err != nil {
				t.Fatalf("Complete %d: %v", i, err)
			}
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
	if total != expired+abandoned {
		t.Fatalf("reapers deleted or moved %d rows; want the %d expired ones and the %d abandoned ones", total, expired, abandoned)
	}
	var rows int
	if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM "+s.Schema()+".records").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != live+abandoned {
		t.Fatalf("%d rows left; want the %d live ones and the %d abandoned ones", rows, live, abandoned)
	}
}

// TestReapMovesLiveRecords: a record still live when its first lease ends
// (completed with a retention, or extended) is not deleted but moved to
// its real end, so later reaps do not look at it again, while the expired
// ones are deleted. A lease that ended unsettled (its owner gone) is
// never deleted: moved an hour ahead, and still UNKNOWN. The database keeps real time, and the Complete and the
// Extend must reach it before the first lease ends: a second is margin
// enough on a loaded machine.
func TestReapMovesLiveRecords(t *testing.T) {
	s := newStoreOpts(t, &pgstore.Options{ReapInterval: -1}) // these tests count what Reap does
	ctx := context.Background()
	const lease = time.Second
	acquire := func(key string) store.LeaseRef {
		t.Helper()
		res, err := s.Acquire(ctx, store.AcquireParams{ID: store.ID{Tenant: "t", Key: key}, Owner: "o-" + key, LeaseDuration: lease})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire %s: %v %+v", key, err, res)
		}
		return store.LeaseRef{ID: res.Record.ID, Owner: "o-" + key, Fence: res.Record.Fence}
	}
	gone := acquire("expired")
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: gone, Result: store.Result{Status: 200}, Retention: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	crashed := acquire("abandoned")
	done := acquire("completed")
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: done, Result: store.Result{Status: 201, Body: []byte("kept")}, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	long := acquire("extended")
	if err := s.Extend(ctx, store.ExtendParams{LeaseRef: long, LeaseDuration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lease + 50*time.Millisecond) // every first lease has ended, by the database's clock too
	if n, err := s.Reap(ctx, 10); err != nil || n != 4 {
		t.Fatalf("first Reap = %d, %v; want 4 (one deleted, three moved)", n, err)
	}
	if n, err := s.Reap(ctx, 10); err != nil || n != 0 {
		t.Fatalf("second Reap = %d, %v; want 0: the live records were moved to their end", n, err)
	}
	if _, err := s.Get(ctx, store.ID{Tenant: "t", Key: "expired"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(expired) = %v; want ErrNotFound", err)
	}
	if rec, err := s.Get(ctx, crashed.ID); err != nil || rec.State != store.StateUnknown || rec.Reason != store.ReasonAbandoned || rec.TTL != 0 {
		t.Fatalf("Get(abandoned) = %+v, %v; want UNKNOWN (abandoned), kept until settled", rec, err)
	}
	if rec, err := s.Get(ctx, done.ID); err != nil || rec.State != store.StateCompleted || string(rec.Result.Body) != "kept" {
		t.Fatalf("Get(completed) = %+v, %v; want the stored result", rec, err)
	}
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: long, Result: store.Result{Status: 200}, Retention: time.Hour}); err != nil {
		t.Fatalf("Complete of the extended lease after a reap = %v", err)
	}
	var rows int
	if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM "+s.Schema()+".records").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 3 {
		t.Fatalf("%d rows left; want the 2 live ones and the abandoned one", rows)
	}
}

// TestMigrateUpgrade applies the newest migrations on top of a schema an
// older release created and filled: its rows stay readable, and the reaper
// deletes the expired ones and keeps the live ones.
func TestMigrateUpgrade(t *testing.T) {
	pool, schema := testenv.Postgres(t)
	ctx := context.Background()
	if err := pgstore.MigrateTo(ctx, pool, schema, 2); err != nil {
		t.Fatal(err)
	}
	// The rows as the release before migration 003 wrote them.
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.records
		(tenant_id, idempotency_key, state, owner, fence, fingerprint, acquired_at, completed_at, expires_at, status, header, body)
		VALUES ('t', 'old-expired', 'C', 'o', nextval('`+schema+`.fence_seq'), 'fp', now() - interval '2 hours', now() - interval '2 hours', now() - interval '1 hour', 200, '', 'gone'),
		       ('t', 'old-live', 'C', 'o', nextval('`+schema+`.fence_seq'), 'fp', now(), now(), now() + interval '1 hour', 200, '', 'kept')`); err != nil {
		t.Fatal(err)
	}
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatalf("Migrate on top of version 2: %v", err)
	}
	s, err := pgstore.New(pool, &pgstore.Options{Schema: schema, ReapInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.Reap(ctx, 10); err != nil || n != 2 {
		t.Fatalf("Reap = %d, %v; want 2 (the old rows are due at once)", n, err)
	}
	if _, err := s.Get(ctx, store.ID{Tenant: "t", Key: "old-expired"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(old-expired) = %v; want ErrNotFound", err)
	}
	rec, err := s.Get(ctx, store.ID{Tenant: "t", Key: "old-live"})
	if err != nil || string(rec.Result.Body) != "kept" {
		t.Fatalf("Get(old-live) = %+v, %v; want the stored result", rec, err)
	}
	if n, err := s.Reap(ctx, 10); err != nil || n != 0 {
		t.Fatalf("second Reap = %d, %v; want 0", n, err)
	}
	res, err := s.Acquire(ctx, store.AcquireParams{ID: store.ID{Tenant: "t", Key: "old-expired"}, Owner: "new", LeaseDuration: time.Minute})
	if err != nil || !res.Acquired || res.Record.Fence <= 2 {
		t.Fatalf("Acquire after the upgrade = %+v, %v; want acquired", res, err)
	}
}

// TestNoIndexOnCompletedColumns: Complete and Extend change only columns
// that no index covers, by its columns or its predicate, so PostgreSQL can
// update their rows in place (HOT) instead of adding index entries on
// every transition; all but records_leases, the index of the leases by
// their end, which must hold the PROCESSING rows alone so that ListUnknown
// finds an abandoned lease without reading the others (issue 31, item 6).
func TestNoIndexOnCompletedColumns(t *testing.T) {
	s := newStore(t)
	rows, err := s.Pool().Query(context.Background(), `SELECT i.indexrelid::regclass::text, a.attname,
			coalesce(pg_get_expr(i.indpred, i.indrelid), '')
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = $1::regclass`, s.Schema()+".records")
	if err != nil {
		t.Fatal(err)
	}
	changed := []string{"state", "completed_at", "expires_at", "lease_until", "status", "header", "body"}
	var indexed int
	for rows.Next() {
		var index, column, predicate string
		if err := rows.Scan(&index, &column, &predicate); err != nil {
			t.Fatal(err)
		}
		indexed++
		if strings.TrimPrefix(index, s.Schema()+".") == "records_leases" {
			if column != "lease_until" || predicate != "(state = 'P'::\"char\")" {
				t.Errorf("records_leases covers %s where %s; want lease_until where state = 'P'", column, predicate)
			}
			continue
		}
		for _, c := range changed {
			if column == c || strings.Contains(predicate, c) {
				t.Errorf("index %s covers %s (where %s), which Complete or Extend changes", index, column, predicate)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if indexed == 0 {
		t.Fatal("found no indexed column at all")
	}
}

// An acquisition answers its record PROCESSING, as every store does, even
// when its lease ended before the statement returned: the row's columns
// are read at RETURNING, later than the INSERT's clock, and a stall
// between the two (a loaded machine, a 60 ms lease in the conformance
// suite) reported the row just taken as abandoned UNKNOWN. A lease of one
// microsecond ends before every RETURNING.
func TestAcquireAnswersProcessingWhenItsLeaseEndedMeanwhile(t *testing.T) {
	s := newStore(t)
	for _, takeOver := range []bool{false, true} {
		p := store.AcquireParams{ID: store.ID{Tenant: "t", Key: fmt.Sprint("k-", takeOver)}, Owner: "o1", Fingerprint: "fp",
			LeaseDuration: time.Microsecond, Retention: time.Hour}
		res, err := s.Acquire(context.Background(), p)
		if err != nil || !res.Acquired || res.Record.State != store.StateProcessing || res.Record.Reason != "" {
			t.Fatalf("Acquire = %+v, %v; want acquired, PROCESSING", res, err)
		}
		if !takeOver {
			continue
		}
		p.Owner, p.TakeOver = "o2", true // the same request takes over its ended attempt
		res, err = s.Acquire(context.Background(), p)
		if err != nil || !res.Acquired || res.Takeover == nil || res.Record.State != store.StateProcessing || res.Record.Owner != "o2" {
			t.Fatalf("takeover Acquire = %+v, %v; want acquired by o2, PROCESSING, with the takeover", res, err)
		}
	}
}

// TestMigrateKeepsUnsettledRows: migration 009 turns the P and U rows an
// older release wrote, their end passed or not, into rows kept until
// settled: read UNKNOWN, never taken by an acquisition, never reaped, read
// without error by an older version still serving (rows without lease_until
// included); and their owner's late Complete still lands.
func TestMigrateKeepsUnsettledRows(t *testing.T) {
	pool, schema := testenv.Postgres(t)
	ctx := context.Background()
	if err := pgstore.MigrateTo(ctx, pool, schema, 8); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.records
		(tenant_id, idempotency_key, state, owner, fence, fingerprint, acquired_at, completed_at, lease_until, expires_at, reap_at, reason)
		VALUES ('t', 'p-past', 'P', 'o1', nextval('`+schema+`.fence_seq'), 'fp', now() - interval '2 days', NULL, now() - interval '2 days', now() - interval '1 day', now() - interval '1 day', NULL),
		       ('t', 'u-past', 'U', 'o2', nextval('`+schema+`.fence_seq'), 'fp', now() - interval '2 days', now() - interval '2 days', now() - interval '2 days', now() - interval '1 day', now() - interval '1 day', 'timeout'),
		       ('t', 'u-live', 'U', 'o3', nextval('`+schema+`.fence_seq'), 'fp', now(), now(), now(), now() + interval '1 hour', now() + interval '1 hour', 'timeout'),
		       -- A P row from before 004 (no lease_until) that turned UNKNOWN.
		       ('t', 'u-nolease', 'U', 'o4', nextval('`+schema+`.fence_seq'), 'fp', now() - interval '2 days', now() - interval '2 days', NULL, now() - interval '1 day', now() - interval '1 day', 'timeout'),
		       ('t', 'p-nolease', 'P', 'o5', nextval('`+schema+`.fence_seq'), 'fp', now() - interval '2 days', NULL, NULL, now() - interval '1 day', now() - interval '1 day', NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatalf("Migrate on top of version 8: %v", err)
	}
	// Older instances still serving read every migrated row (before any reap) without error.
	checkOlderRead(t, pool, schema, 5)
	var noLease int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.records WHERE lease_until IS NULL`).Scan(&noLease); err != nil || noLease != 0 {
		t.Fatalf("%d rows without lease_until, %v; want 0", noLease, err)
	}
	s, err := pgstore.New(pool, &pgstore.Options{Schema: schema, ReapInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Reap(ctx, 10); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"p-past", "u-past", "u-live", "u-nolease", "p-nolease"} {
		id := store.ID{Tenant: "t", Key: key}
		rec, err := s.Get(ctx, id)
		if err != nil || rec.State != store.StateUnknown || rec.TTL != 0 {
			t.Fatalf("Get(%s) after the migration = %+v, %v; want UNKNOWN, TTL 0 (kept until settled)", key, rec, err)
		}
		if res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "new", Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Hour}); err != nil || res.Acquired {
			t.Fatalf("Acquire(%s) after the migration = %+v, %v; want not acquired", key, res, err)
		}
	}
	id := store.ID{Tenant: "t", Key: "p-past"}
	rec, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ref := store.LeaseRef{ID: id, Owner: "o1", Fence: rec.Fence}
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 200}, Retention: time.Hour}); err != nil {
		t.Fatalf("late Complete of a migrated row = %v; want nil", err)
	}
}

// An UNKNOWN row reports the retentions its attempt asked for (the longer
// of each, through MarkUnknown), so that a resolution keeps its result at
// least that long: its TTL is 0 (kept until settled) and no longer says.
func TestUnknownRowKeepsItsAttemptsRetentions(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	id := store.ID{Tenant: "t", Key: "k"}
	res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Hour, KeyRetention: 2 * time.Hour})
	if err != nil || !res.Acquired || res.Record.Retention != time.Hour || res.Record.KeyRetention != 2*time.Hour {
		t.Fatalf("Acquire = %+v, %v; want acquired with the retentions 1h and 2h", res, err)
	}
	ref := store.LeaseRef{ID: id, Owner: "o", Fence: res.Record.Fence}
	if err := s.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: ref, Reason: "timeout", Retention: 3 * time.Hour, KeyRetention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, id); err != nil || rec.State != store.StateUnknown || rec.TTL != 0 || rec.Retention != 3*time.Hour || rec.KeyRetention != 2*time.Hour {
		t.Fatalf("Get = %+v, %v; want UNKNOWN, TTL 0, retentions 3h and 2h (the longer of each)", rec, err)
	}
}
