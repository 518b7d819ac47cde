package layered_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/layered"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newPG(t testing.TB) *pgstore.Store {
	t.Helper()
	pool, schema := testenv.Postgres(t)
	if err := pgstore.Migrate(context.Background(), pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	pg, err := pgstore.New(pool, &pgstore.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	return pg
}

func newLayered(t testing.TB, client redis.Scripter, pg store.Store, prefix string) *layered.Store {
	t.Helper()
	s, err := layered.New(client, pg, &layered.Options{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	client := testenv.Redis(t)
	pg := newPG(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) (store.Store, func(time.Duration)) {
			return newLayered(t, client, pg, testenv.Prefix(t)), storetest.Sleep // Redis and PostgreSQL keep real time
		},
	})
}

// TestRedisDown: with Redis unreachable, Acquire, Complete and replays
// fall through to the authority; Delete fails so that no stale mirror can
// outlive an invalidation unnoticed.
func TestRedisDown(t *testing.T) {
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer down.Close()
	s := newLayered(t, down, newPG(t), "unused:")
	ctx := context.Background()
	id := store.ID{Tenant: "acme", Key: "k"}
	res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "a", Fingerprint: "fp", LeaseDuration: time.Hour})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire with Redis down = %+v, %v; want acquired from the authority", res, err)
	}
	ref := store.LeaseRef{ID: id, Owner: "a", Fence: res.Record.Fence}
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 201, Body: []byte("ok")}, Retention: time.Hour}); err != nil {
		t.Fatalf("Complete with Redis down: %v", err)
	}
	res, err = s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "b", Fingerprint: "fp", LeaseDuration: time.Hour})
	if err != nil || res.Acquired || res.Record.Result == nil || string(res.Record.Result.Body) != "ok" {
		t.Fatalf("retry with Redis down = %+v, %v; want the replay from the authority", res, err)
	}
	if _, err := s.Delete(ctx, store.DeleteParams{ID: id}); err == nil {
		t.Fatal("Delete with Redis down succeeded; want an error, the mirror may remain")
	}
}

// deletePrefix removes every Redis key under prefix with SCAN and DEL:
// other tests share the server, so no FLUSHALL.
func deletePrefix(t testing.TB, client *redis.Client, prefix string) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	iter := client.Scan(ctx, 0, prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		if err := client.Del(ctx, iter.Val()).Err(); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRedisForgetsMidRun runs workers with retries over a set of keys and
// removes all of the mirror's Redis keys several times during the run: no
// key is executed twice, and every retry gets the first result.
func TestRedisForgetsMidRun(t *testing.T) {
	client := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	s := newLayered(t, client, newPG(t), prefix)
	engine, err := idem.New(s, &idem.Options{LeaseDuration: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const keys, workers, rounds = 20, 8, 15
	var executions [keys]atomic.Int32
	results := make([]sync.Map, keys) // the distinct results seen per key
	var flushed atomic.Int32
	ctx := context.Background()
	// The flusher removes the mirror at every sixth of the calls, counted,
	// not timed: the flushes fall within the run and after stored results,
	// however the scheduler interleaves the workers and the flusher.
	const calls, flushes = workers * rounds * keys, 5
	var made atomic.Int32
	progress, workersDone := make(chan struct{}, flushes), make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				for k := range keys {
					req := idem.Request{Tenant: "acme", Key: fmt.Sprint("key-", k), Fingerprint: "fp"}
					out, _, err := engine.Do(ctx, req, func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
						executions[k].Add(1)
						time.Sleep(time.Millisecond)
						return fmt.Appendf(nil, "worker %d round %d fence %d", w, r, lease.Fence()), nil
					})
					if made.Add(1)%(calls/(flushes+1)) == 0 {
						select {
						case progress <- struct{}{}:
						default:
						}
					}
					var inFlight *idem.InFlightError
					if errors.As(err, &inFlight) {
						continue
					}
					if err != nil {
						t.Errorf("Do(%s): %v", req.Key, err)
						return
					}
					results[k].Store(string(out), true)
				}
			}
		})
	}
	var flusher sync.WaitGroup
	flusher.Go(func() {
		for range flushes {
			select {
			case <-progress:
			case <-workersDone:
				return
			}
			flushed.Add(int32(deletePrefix(t, client, prefix)))
		}
	})
	wg.Wait()
	close(workersDone)
	flusher.Wait()
	if flushed.Load() == 0 {
		t.Fatal("the test removed no Redis keys: the fault did not bite")
	}
	for k := range keys {
		if n := executions[k].Load(); n != 1 {
			t.Errorf("key-%d executed %d times; want 1", k, n)
		}
		distinct := 0
		results[k].Range(func(any, any) bool { distinct++; return true })
		if distinct > 1 {
			t.Errorf("key-%d returned %d different results; want one", k, distinct)
		}
	}
	// The authority re-warms a forgotten mirror on the next read.
	deletePrefix(t, client, prefix)
	id := store.ID{Tenant: "acme", Key: "key-0"}
	if _, err := s.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
	if n, err := client.Exists(ctx, s.MirrorKey(id)).Result(); err != nil || n != 1 {
		t.Fatalf("mirror after a read = %d, %v; want re-warmed", n, err)
	}
}

// TestProcessingSurvivesForgottenMirror: a key in flight stays in flight
// when Redis forgets it; the authority refuses a second lease.
func TestProcessingSurvivesForgottenMirror(t *testing.T) {
	client := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	s := newLayered(t, client, newPG(t), prefix)
	ctx := context.Background()
	id := store.ID{Tenant: "acme", Key: "k"}
	first, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "a", Fingerprint: "fp", LeaseDuration: time.Hour})
	if err != nil || !first.Acquired {
		t.Fatalf("Acquire = %+v, %v", first, err)
	}
	if deletePrefix(t, client, prefix) == 0 {
		t.Fatal("no mirror to forget")
	}
	second, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "b", Fingerprint: "fp", LeaseDuration: time.Hour})
	if err != nil || second.Acquired || second.Record.Owner != "a" || second.Record.Fence != first.Record.Fence {
		t.Fatalf("Acquire after Redis forgot = %+v, %v; want not acquired, held by a", second, err)
	}
}

// A delete whose reply the authority lost may have landed: the mirror no
// longer answers with the record (found by internal/check, layered: after
// such a delete the mirror went on replaying the deleted key while the
// authority had no row, and a Resolve of it answered "not found").
func TestDeleteWithLostReplyDropsTheMirror(t *testing.T) {
	client := testenv.Redis(t)
	authority := &storekit.Faulty{Store: newPG(t)}
	s := newLayered(t, client, authority, testenv.Prefix(t))
	ctx := context.Background()
	id := store.ID{Tenant: "acme", Key: "deleted"}
	res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "a", Fingerprint: "fp", LeaseDuration: time.Hour, Retention: time.Hour})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
	ref := store.LeaseRef{ID: id, Owner: "a", Fence: res.Record.Fence}
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 201}, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, id); err != nil || rec.State != store.StateCompleted {
		t.Fatalf("Get = %+v, %v; want COMPLETED (and mirrored)", rec, err)
	}
	authority.LoseNext(storekit.OpDelete, 1)
	if _, err := s.Delete(ctx, store.DeleteParams{ID: id}); err == nil {
		t.Fatal("Delete whose reply was lost = nil error; want the loss reported")
	}
	if rec, err := s.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after a delete that landed with its reply lost = %+v, %v; want ErrNotFound, not the mirror's copy", rec, err)
	}
}
