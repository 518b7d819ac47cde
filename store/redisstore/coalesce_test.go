package redisstore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storetest"
)

// TestConformanceCoalesce: the conformance suite, unchanged, against the
// coalescing store, on both clients, and on rueidis with every option
// that combines with it (FCALL, the near cache).
func TestConformanceCoalesce(t *testing.T) {
	goredis := testenv.Redis(t)
	plain := rueidisClient(t)
	caching := cachingClient(t, testRedisAddr(t), nil)
	stores := map[string]func(prefix string) (*redisstore.Store, error){
		"go-redis": func(prefix string) (*redisstore.Store, error) {
			return redisstore.New(goredis, &redisstore.Options{Prefix: prefix, Coalesce: true})
		},
		"rueidis": func(prefix string) (*redisstore.Store, error) {
			return redisstore.NewRueidis(plain, &redisstore.Options{Prefix: prefix, Coalesce: true})
		},
		"rueidis-functions-nearcache": func(prefix string) (*redisstore.Store, error) {
			return redisstore.NewRueidis(caching, &redisstore.Options{Prefix: prefix, Coalesce: true, Functions: true, NearCache: true})
		},
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, storetest.Harness{
				New: func(t *testing.T) (store.Store, func(time.Duration)) {
					s, err := newStore(testenv.Prefix(t))
					if err != nil {
						t.Fatal(err)
					}
					if _, on := s.CoalesceStats(); !on {
						t.Fatal("CoalesceStats reports coalescing off")
					}
					return s, storetest.Sleep // Redis keeps real time
				},
			})
		})
	}
}

// clientStores returns a store with opts on each client (go-redis and
// rueidis), on the server at addr.
func clientStores(t *testing.T, addr string, opts *redisstore.Options) map[string]*redisstore.Store {
	t.Helper()
	gr := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { gr.Close() })
	rd, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rd.Close)
	viaGoredis, err := redisstore.New(gr, opts)
	if err != nil {
		t.Fatal(err)
	}
	viaRueidis, err := redisstore.NewRueidis(rd, opts)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*redisstore.Store{"go-redis": viaGoredis, "rueidis": viaRueidis}
}

func acquireParams(key, owner string) store.AcquireParams {
	return store.AcquireParams{ID: store.ID{Tenant: "t", Key: key}, Owner: owner, Fingerprint: "fp",
		LeaseDuration: time.Minute, Retention: time.Hour}
}

// waitSending waits until n script calls of s are in flight.
func waitSending(t *testing.T, s *redisstore.Store, n int) {
	t.Helper()
	for s.CoalesceSending() < n {
		if t.Context().Err() != nil {
			t.Fatalf("%d calls in flight; want %d", s.CoalesceSending(), n)
		}
		runtime.Gosched()
	}
}

// waitQueued waits until n operations of s are queued for the next batch.
func waitQueued(t *testing.T, s *redisstore.Store, n int) {
	t.Helper()
	for s.CoalesceQueued() < n {
		if t.Context().Err() != nil {
			t.Fatalf("%d operations queued; want %d", s.CoalesceQueued(), n)
		}
		runtime.Gosched()
	}
}

// TestCoalesceLoneOperationGoesAtOnce: with nothing in flight, an
// operation is sent at once by its own script (no timer, no batch): the
// server (a private one, INFO commandstats) runs one EVALSHA per call, and
// the store counts it as sent alone.
func TestCoalesceLoneOperationGoesAtOnce(t *testing.T) {
	srv, admin := privateRedis(t)
	for name, s := range clientStores(t, srv.Addr, &redisstore.Options{Coalesce: true}) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			completeKey(t, s, store.ID{Tenant: "t", Key: name + "-warm"}, nearResult) // loads the scripts
			before, _ := s.CoalesceStats()
			var a store.AcquireResult
			calls := commandsBetween(t, admin, func() {
				var err error
				if a, err = s.Acquire(ctx, acquireParams(name+"-lone", "o")); err != nil || !a.Acquired {
					t.Fatalf("Acquire = %+v, %v; want acquired", a, err)
				}
				ref := store.LeaseRef{ID: a.Record.ID, Owner: "o", Fence: a.Record.Fence}
				if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: nearResult, Retention: time.Hour}); err != nil {
					t.Fatal(err)
				}
			})
			// The scripts' own commands (TIME, GET, SET) count as well.
			if calls["evalsha"] != 2 || calls["eval"] != 0 || calls["fcall"] != 0 {
				t.Errorf("an acquire and a complete ran %v on the server; want 2 EVALSHA (one script each)", calls)
			}
			after, _ := s.CoalesceStats()
			if after.Single-before.Single != 2 || after.Batches != before.Batches {
				t.Errorf("stats went from %+v to %+v; want two operations sent alone and no batch", before, after)
			}
		})
	}
}

// TestCoalesceBatchesUnderLoad holds one call in flight (CLIENT PAUSE
// WRITE on a private server), queues operations behind it, and checks
// that they went out as one batch script, each answered as its own script
// would have answered it: distinct keys acquired, one of two acquires of
// the same key, a read of the held record, and a corrupt record's error
// kept to its own operation; the batch reads the server's clock once
// (INFO commandstats), so its acquisitions share one instant.
func TestCoalesceBatchesUnderLoad(t *testing.T) {
	srv, admin := privateRedis(t)
	ctx := context.Background()
	for name, s := range clientStores(t, srv.Addr, &redisstore.Options{Coalesce: true}) {
		t.Run(name, func(t *testing.T) {
			completeKey(t, s, store.ID{Tenant: "t", Key: name + "-warm"}, nearResult) // loads the scripts
			corrupt := store.ID{Tenant: "t", Key: name + "-corrupt"}
			if err := admin.Set(ctx, s.RecordKey(corrupt), "not a record", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			before, _ := s.CoalesceStats()
			if err := admin.Do(ctx, "client", "pause", 60000, "write").Err(); err != nil {
				t.Fatal(err)
			}
			unpaused := false
			unpause := func() {
				if !unpaused {
					unpaused = true
					if err := admin.Do(ctx, "client", "unpause").Err(); err != nil {
						t.Error(err)
					}
				}
			}
			defer unpause()

			held := make(chan error, redisstore.CoalesceInFlight)
			for i := range redisstore.CoalesceInFlight {
				go func() { // sent alone, and held by the pause
					_, err := s.Acquire(ctx, acquireParams(name+"-held"+strconv.Itoa(i), "held"))
					held <- err
				}()
			}
			waitSending(t, s, redisstore.CoalesceInFlight)
			type result struct {
				key string
				res store.AcquireResult
				err error
			}
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				results []result
			)
			keys := []string{"a", "b", "c", "d", "e", "f", "dup", "dup"}
			queue := func(i int, key string) {
				wg.Go(func() {
					res, err := s.Acquire(ctx, acquireParams(name+"-"+key, "owner-"+string(rune('0'+i))))
					mu.Lock()
					results = append(results, result{key, res, err})
					mu.Unlock()
				})
			}
			for i, key := range keys {
				queue(i, key)
			}
			var getErr, corruptErr error
			var got store.Record
			wg.Go(func() { got, getErr = s.Get(ctx, store.ID{Tenant: "t", Key: name + "-a"}) })
			wg.Go(func() { _, corruptErr = s.Get(ctx, corrupt) })
			waitQueued(t, s, len(keys)+2)
			calls := commandsBetween(t, admin, func() {
				unpause()
				for range redisstore.CoalesceInFlight {
					if err := <-held; err != nil {
						t.Fatalf("held Acquire: %v", err)
					}
				}
				wg.Wait()
			})
			// Each held acquire reads the clock, and the batch reads it once
			// for all its operations.
			if want := redisstore.CoalesceInFlight + 1; calls["time"] != want {
				t.Errorf("the held calls and the batch ran TIME %d times; want %d", calls["time"], want)
			}

			after, _ := s.CoalesceStats()
			want := uint64(len(keys) + 2)
			if after.Batches-before.Batches != 1 || after.Carried-before.Carried != want || after.Largest < want {
				t.Errorf("stats went from %+v to %+v; want one batch of %d operations", before, after, want)
			}
			dupAcquired := 0
			var acquiredAt time.Time // the same for every acquire of the batch: its one instant
			for _, r := range results {
				if r.err == nil && r.res.Acquired {
					if at := r.res.Record.AcquiredAt; acquiredAt.IsZero() {
						acquiredAt = at
					} else if !at.Equal(acquiredAt) {
						t.Errorf("Acquire %s acquired at %v, another of its batch at %v; want one instant", r.key, at, acquiredAt)
					}
				}
				switch {
				case r.err != nil:
					t.Errorf("Acquire %s: %v", r.key, r.err)
				case r.key == "dup" && r.res.Acquired:
					dupAcquired++
				case r.key == "dup" && r.res.Record.State != store.StateProcessing:
					t.Errorf("the losing Acquire of dup saw %+v; want the winner's PROCESSING record", r.res.Record)
				case r.key != "dup" && !r.res.Acquired:
					t.Errorf("Acquire %s = %+v; want acquired", r.key, r.res)
				}
			}
			if dupAcquired != 1 {
				t.Errorf("%d of two Acquires of one key in one batch won; want 1", dupAcquired)
			}
			// The read ran in the batch after or before the acquire of a:
			// either answer is one a single script could give.
			if getErr != nil && !errors.Is(getErr, store.ErrNotFound) {
				t.Errorf("Get a = %v", getErr)
			}
			if getErr == nil && (got.State != store.StateProcessing || got.Owner != "owner-0") {
				t.Errorf("Get a = %+v; want owner-0's PROCESSING record", got)
			}
			if corruptErr == nil {
				t.Error("Get of a corrupt record in a batch succeeded")
			}
		})
	}
}

// holdScripts is a go-redis hook that, while on, holds every script call
// (EVALSHA, EVAL): it tells of each on held, then waits for a token on
// release.
type holdScripts struct {
	on      atomic.Bool
	held    chan string
	release chan struct{}
}

func (h *holdScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && strings.HasPrefix(cmd.Name(), "eval") {
			sha, _ := cmd.Args()[1].(string)
			h.held <- sha
			<-h.release
		}
		return next(ctx, cmd)
	}
}

func (h *holdScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCoalesceCancelled: a caller whose context ends while its operation
// is queued gets the context's error and the operation never runs; one
// whose context ends while its batch is in flight gets an error at once,
// and its operation may have run, as when a single script's reply is
// lost: a retry as the same owner finds its own record (what the engine
// does after an acquire whose reply it did not get).
func TestCoalesceCancelled(t *testing.T) {
	hook := &holdScripts{held: make(chan string), release: make(chan struct{})}
	client := redis.NewClient(&redis.Options{Addr: testRedisAddr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	client.AddHook(hook)
	s, err := redisstore.New(client, &redisstore.Options{Prefix: testenv.Prefix(t), Coalesce: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	completeKey(t, s, store.ID{Tenant: "t", Key: "warm"}, nearResult) // loads the scripts
	if err := client.ScriptLoad(ctx, redisstore.BatchSource).Err(); err != nil {
		t.Fatal(err)
	}
	hook.on.Store(true)
	defer hook.on.Store(false)

	acquire := func(ctx context.Context, key string) <-chan error {
		done := make(chan error, 1)
		go func() {
			res, err := s.Acquire(ctx, acquireParams(key, key))
			if err == nil && !res.Acquired {
				err = errors.New("not acquired")
			}
			done <- err
		}()
		return done
	}
	var lone []<-chan error // calls sent alone, one per place in flight
	for i := range redisstore.CoalesceInFlight {
		lone = append(lone, acquire(ctx, "lone"+strconv.Itoa(i)))
		if sha := <-hook.held; sha == redisstore.BatchSHA {
			t.Fatal("a lone call went out as a batch")
		}
	}
	queuedCtx, cancelQueued := context.WithCancel(ctx)
	flightCtx, cancelFlight := context.WithCancel(ctx)
	queued := acquire(queuedCtx, "queued")
	waitQueued(t, s, 1)
	inFlight, kept := acquire(flightCtx, "in-flight"), acquire(ctx, "kept")
	waitQueued(t, s, 3)

	cancelQueued()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued Acquire cancelled = %v; want context.Canceled", err)
	}
	hook.release <- struct{}{} // one lone call; its sender then sends the batch
	if sha := <-hook.held; sha != redisstore.BatchSHA {
		t.Fatal("the two queued calls did not go out as one batch")
	}
	cancelFlight()
	if err := <-inFlight; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire cancelled in flight = %v; want context.Canceled", err)
	}
	for range redisstore.CoalesceInFlight { // the batch and the other lone calls
		hook.release <- struct{}{}
	}
	for _, done := range append(lone, kept) {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	hook.on.Store(false)

	if _, err := s.Get(ctx, store.ID{Tenant: "t", Key: "queued"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of the key whose Acquire was cancelled while queued = %v; want ErrNotFound: it never ran", err)
	}
	again, err := s.Acquire(ctx, acquireParams("in-flight", "in-flight"))
	if err != nil || again.Record.State != store.StateProcessing || again.Record.Owner != "in-flight" {
		t.Errorf("retry of the Acquire cancelled in flight = %+v, %v; want its own PROCESSING record", again, err)
	}
	if st, _ := s.CoalesceStats(); st.Batches != 1 || st.Carried != 2 {
		t.Errorf("stats %+v; want one batch of 2", st)
	}
}

func TestCoalesceOptions(t *testing.T) {
	if _, err := redisstore.New(testenv.Redis(t), &redisstore.Options{Coalesce: true, ReplicaAcks: 1}); err == nil ||
		!strings.Contains(err.Error(), "ReplicaAcks") {
		t.Errorf("New with Coalesce and ReplicaAcks = %v; want a refusal that names both", err)
	}
	s, err := redisstore.New(testenv.Redis(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, on := s.CoalesceStats(); on {
		t.Error("CoalesceStats reports coalescing on by default")
	}
	s, err = redisstore.OpenURL(testenv.RedisURL()+"?coalesce=on", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, on := s.CoalesceStats(); !on {
		t.Error("OpenURL(?coalesce=on) did not turn coalescing on")
	}
	s, err = redisstore.OpenURL(testenv.RedisURL()+"?coalesce=on&near_cache=on", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, on := s.CoalesceStats(); !on {
		t.Error("OpenURL(?coalesce=on&near_cache=on) did not turn coalescing on")
	}
	if _, on := s.NearCacheStats(); !on {
		t.Error("OpenURL(?coalesce=on&near_cache=on) did not turn the near cache on")
	}
	if _, err := redisstore.OpenURL(testenv.RedisURL()+"?coalesce=yes", nil); !errors.Is(err, redisstore.ErrBadURL) {
		t.Errorf("OpenURL(?coalesce=yes) = %v; want ErrBadURL", err)
	}
}
