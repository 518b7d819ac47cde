package redisstore_test

import (
	"context"
	"crypto/rand"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// invalidationTimes records when the client's reader handled the
// invalidation of each key (rueidis drops the cached entry, then calls
// OnInvalidations).
type invalidationTimes struct {
	mu      sync.Mutex
	at      map[string]time.Time // guarded by mu: the first invalidation of each key
	handled chan struct{}        // a receive after each hook call
}

func newInvalidationTimes() *invalidationTimes {
	return &invalidationTimes{at: map[string]time.Time{}, handled: make(chan struct{}, 1)}
}

func (v *invalidationTimes) hook(keys []rueidis.RedisMessage) {
	now := time.Now()
	v.mu.Lock()
	for _, k := range keys {
		if s, err := k.ToString(); err == nil {
			if _, ok := v.at[s]; !ok {
				v.at[s] = now
			}
		}
	}
	v.mu.Unlock()
	select {
	case v.handled <- struct{}{}:
	default:
	}
}

// wait waits until the invalidation of key has been handled, failing t
// after 10s.
func (v *invalidationTimes) wait(t *testing.T, key string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for _, ok := v.of(key); !ok; _, ok = v.of(key) {
		select {
		case <-v.handled:
		case <-timeout:
			t.Fatalf("no invalidation of %s within 10s", key)
		}
	}
}

func (v *invalidationTimes) of(key string) (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	at, ok := v.at[key]
	return at, ok
}

// staleRound is what the replays of one key saw around its removal.
type staleRound struct {
	after        int           // replays begun after the removal returned
	stale        int           // of those, answered with the removed record
	staleInvalid int           // of those, begun after this client handled the invalidation
	lastStale    time.Duration // the latest start of a stale replay after the removal returned
	invalidation time.Duration // from the removal's return to the invalidation's handling (<0: before it)
}

// staleWindowRound completes a key through s, fills the near cache, and
// removes the key with remove while replayers goroutines replay it
// through s, from the cache, non-stop.
// Every replay begun after remove returned that still gets the COMPLETED
// record it removed is stale: the record of a key that may now run again.
func staleWindowRound(t *testing.T, s *redisstore.Store, inv *invalidationTimes, replayers int, remove func(store.ID) (bool, error)) staleRound {
	t.Helper()
	id := store.ID{Tenant: "stale", Key: rand.Text()}
	key := s.RecordKey(id)
	fence := completeKey(t, s, id, nearResult)
	replay(t, s, id)
	replay(t, s, id) // served from the cache from here on
	const replaysAfter = 20
	var (
		removedAt atomic.Int64 // UnixNano when remove returned; 0 before
		running   sync.WaitGroup
		started   sync.WaitGroup
		mu        sync.Mutex
		r         staleRound // guarded by mu
	)
	started.Add(replayers)
	for range replayers {
		running.Go(func() {
			var once sync.Once
			defer once.Do(started.Done)
			// Until 20 replays have begun after this client handled the
			// invalidation that the removal caused.
			for n, afterInvalidation := 0, 0; afterInvalidation < replaysAfter; n++ {
				if n == 3 {
					once.Do(started.Done)
				}
				begun := time.Now()
				removed := removedAt.Load()
				invalidated, seen := inv.of(key)
				seen = seen && !invalidated.After(begun)
				a, err := s.Acquire(context.Background(), store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp",
					LeaseDuration: time.Minute, Retention: time.Hour})
				if err != nil {
					t.Error(err)
					return
				}
				if removed == 0 { // before or during the removal: any answer is right
					continue
				}
				if begun.Sub(time.Unix(0, removed)) > time.Minute {
					t.Errorf("the invalidation of %s was not handled within a minute of its removal", key)
					return
				}
				if seen {
					afterInvalidation++
				}
				mu.Lock()
				r.after++
				if !a.Acquired && a.Record.State == store.StateCompleted && a.Record.Fence == fence {
					r.stale++
					r.lastStale = max(r.lastStale, begun.Sub(time.Unix(0, removed)))
					if seen {
						r.staleInvalid++
					}
				}
				mu.Unlock()
			}
		})
	}
	started.Wait() // every replayer is replaying from the cache
	if ok, err := remove(id); err != nil || !ok {
		t.Errorf("removing %v = %v, %v; want removed", id, ok, err)
	}
	removedAt.Store(time.Now().UnixNano())
	running.Wait()
	if at, ok := inv.of(key); ok {
		r.invalidation = at.Sub(time.Unix(0, removedAt.Load()))
	}
	return r
}

// TestNearCacheStaleWindow measures how long a near cache keeps serving a
// record that was deleted, with replays of it running all along: removed
// through the store itself (as the gateway's admin API does) and through
// another client (another process: `idem keys delete`, another gateway).
//
// Through the store itself, no replay that begins after Delete returns may
// get the deleted record. Before issue 22 (item 11) about one removal in
// 40 to 100 under load was followed by replays of the deleted record for
// up to ~20ms; TestNearCacheRemovalNotUndone shows the cause step by step.
// Through another client, a replay may get it until this client's reader
// has handled the invalidation, and never after: the test asserts that,
// and logs how long the window was (docs/redis-internals.md has figures).
func TestNearCacheStaleWindow(t *testing.T) {
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	addr := testRedisAddr(t)
	nearStore := func(t *testing.T, prefix string, coalesce bool) (*redisstore.Store, *invalidationTimes) {
		inv := newInvalidationTimes()
		s, err := redisstore.NewRueidis(cachingClient(t, addr, inv.hook),
			&redisstore.Options{Prefix: prefix, NearCache: true, Coalesce: coalesce})
		if err != nil {
			t.Fatal(err)
		}
		return s, inv
	}
	summary := func(t *testing.T, rs []staleRound) (sum staleRound) {
		var windows, invs []time.Duration
		for _, r := range rs {
			sum.after += r.after
			sum.stale += r.stale
			sum.staleInvalid += r.staleInvalid
			if r.stale > 0 {
				windows = append(windows, r.lastStale)
			}
			invs = append(invs, r.invalidation)
		}
		slices.Sort(windows)
		slices.Sort(invs)
		t.Logf("%d removals, %d replays begun after them: %d stale (%d after the invalidation was handled), in %d removals; "+
			"latest stale replay after the removal returned: median %v, max %v; invalidation handled after the removal returned: median %v, max %v",
			len(rs), sum.after, sum.stale, sum.staleInvalid, len(windows), median(windows), last(windows), median(invs), last(invs))
		return sum
	}
	for _, coalesce := range []bool{false, true} {
		name := map[bool]string{false: "OwnDelete", true: "OwnDeleteCoalesced"}[coalesce]
		t.Run(name, func(t *testing.T) {
			s, inv := nearStore(t, testenv.Prefix(t), coalesce)
			var rs []staleRound
			for range rounds {
				rs = append(rs, staleWindowRound(t, s, inv, 8, func(id store.ID) (bool, error) {
					return s.Delete(context.Background(), store.DeleteParams{ID: id})
				}))
			}
			if sum := summary(t, rs); sum.stale > 0 {
				t.Errorf("%d replays begun after this store's Delete returned got the deleted record", sum.stale)
			}
		})
	}
	// One replayer leaves the client CPU to read the invalidation; eight
	// keep its two cores busy, and its reader waits for a time slice.
	for _, replayers := range []int{1, 8} {
		t.Run("OtherClientDelete/replayers="+strconv.Itoa(replayers), func(t *testing.T) {
			prefix := testenv.Prefix(t)
			s, inv := nearStore(t, prefix, false)
			other, err := redisstore.New(testenv.Redis(t), &redisstore.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			var rs []staleRound
			for range rounds {
				rs = append(rs, staleWindowRound(t, s, inv, replayers, func(id store.ID) (bool, error) {
					return other.Delete(context.Background(), store.DeleteParams{ID: id})
				}))
			}
			if sum := summary(t, rs); sum.staleInvalid > 0 {
				t.Errorf("%d replays begun after the invalidation was handled got the deleted record", sum.staleInvalid)
			}
		})
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[len(ds)/2]
}

func last(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[len(ds)-1]
}

// holdingClient is a rueidis client that, once armed, runs a hook in
// front of the first delete script it sends, and holds the reply to a
// script call that carries the owner held until release is closed: the
// reply is real, only its delivery to the store is late, as when the
// goroutine that reads it is not scheduled.
type holdingClient struct {
	rueidis.Client
	held       string        // the owner whose script reply is held
	release    chan struct{} // closed to deliver it
	ran        chan struct{} // closed when the held script has run
	onDelete   func()        // runs before the first delete script
	deleteOnce sync.Once
}

func (c *holdingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	args := cmd.Commands()
	if len(args) > 1 && args[0] == "EVALSHA" && args[1] == redisstore.DeleteSHA {
		c.deleteOnce.Do(c.onDelete)
	}
	if !slices.Contains(args, c.held) {
		return c.Client.Do(ctx, cmd)
	}
	res := c.Client.Do(ctx, cmd)
	close(c.ran)
	<-c.release
	return res
}

// TestNearCacheRemovalNotUndone: a replay whose acquire script read the
// COMPLETED record before this store's Delete ran, and whose reply is
// handled after Delete returned, must not put the record back among those
// the near cache serves. It did (issue 22 item 11), and the next replays
// were served the deleted record from the cache for as long as this
// client had not read the invalidation (up to 10-20ms measured under load,
// TestNearCacheStaleWindow). Here the invalidation is handled first, so
// the next request still executes; what the test sees is whether it went
// through the cache (a cached read that finds the record gone counts as
// Stale) or straight to the script, as it must.
func TestNearCacheRemovalNotUndone(t *testing.T) {
	inv := newInvalidationTimes()
	c := &holdingClient{Client: cachingClient(t, testRedisAddr(t), inv.hook), held: "held-" + rand.Text(),
		release: make(chan struct{}), ran: make(chan struct{})}
	s, err := redisstore.NewRueidis(c, &redisstore.Options{Prefix: testenv.Prefix(t), NearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := store.ID{Tenant: "t", Key: "held"}
	fence := completeKey(t, s, id, nearResult)
	replay(t, s, id)
	replay(t, s, id) // cached

	heldDone := make(chan store.AcquireResult, 1)
	c.onDelete = func() {
		// Delete has begun (the key is no longer served from the cache);
		// a replay now runs the acquire script, which reads the record
		// before the delete script runs.
		go func() {
			a, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: c.held, Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Hour})
			if err != nil {
				t.Error(err)
			}
			heldDone <- a
		}()
		<-c.ran
	}
	if ok, err := s.Delete(ctx, store.DeleteParams{ID: id}); err != nil || !ok {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	close(c.release)
	if a := <-heldDone; a.Acquired || a.Record.Fence != fence {
		t.Fatalf("the held replay = %+v; want the COMPLETED record it read before the delete", a)
	}
	inv.wait(t, s.RecordKey(id))
	before, _ := s.NearCacheStats()
	if a := replay(t, s, id); !a.Acquired {
		t.Fatalf("request after the delete = %+v; want it executed", a)
	}
	after, _ := s.NearCacheStats()
	if after.Misses != before.Misses || after.Stale != before.Stale {
		t.Errorf("the request after the delete read through the near cache (misses %d -> %d, stale %d -> %d): "+
			"the record deleted was noted again from a reply read before the delete", before.Misses, after.Misses, before.Stale, after.Stale)
	}
}
