package redisstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storetest"
)

// cachingClient returns a rueidis client of addr with client-side caching
// on, closed when t ends; onInvalidation, when not nil, is told of every
// invalidation message.
func cachingClient(t testing.TB, addr string, onInvalidation func([]rueidis.RedisMessage)) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true,
		CacheSizeEachConn: 8 << 20, OnInvalidations: onInvalidation})
	if err != nil {
		testenv.Unavailable(t, "Redis at "+addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

func testRedisAddr(t testing.TB) string {
	t.Helper()
	o, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		t.Fatalf("IDEM_TEST_REDIS_URL: %v", err)
	}
	return o.Addr
}

// TestConformanceNearCache: the conformance suite, unchanged, against a
// store that serves COMPLETED records from its near cache.
func TestConformanceNearCache(t *testing.T) {
	client := cachingClient(t, testRedisAddr(t), nil)
	var (
		mu     sync.Mutex
		stores []*redisstore.Store // guarded by mu
	)
	// After the suite's parallel cases: they replay completed records, and
	// some of those replays must have been cached reads.
	t.Cleanup(func() {
		var reads uint64
		for _, s := range stores {
			st, _ := s.NearCacheStats()
			reads += st.Hits + st.Misses
		}
		if reads == 0 {
			t.Error("no cached read in the whole suite: the near cache was never used")
		}
	})
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) (store.Store, func(time.Duration)) {
			s, err := redisstore.NewRueidis(client, &redisstore.Options{Prefix: testenv.Prefix(t), NearCache: true})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			stores = append(stores, s)
			mu.Unlock()
			return s, storetest.Sleep // Redis keeps real time
		},
	})
}

// commandCalls returns the calls per command of INFO commandstats.
func commandCalls(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		n, _ := strings.CutPrefix(strings.Split(rest, ",")[0], "calls=")
		calls[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(n)
	}
	return calls
}

// commandsBetween returns the commands the server ran while f ran, but
// those of the measurement itself (INFO, CONFIG RESETSTAT).
func commandsBetween(t *testing.T, admin *redis.Client, f func()) map[string]int {
	t.Helper()
	if err := admin.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	f()
	calls := commandCalls(t, admin)
	delete(calls, "info")
	delete(calls, "config|resetstat")
	delete(calls, "ping") // rueidis's keep-alive on an idle connection
	return calls
}

// privateRedis starts a redis-server of the test's own, so that INFO
// commandstats counts only the test's commands.
func privateRedis(t *testing.T) (*redisproc.Server, *redis.Client) {
	t.Helper()
	needTopology(t)
	srv, err := redisproc.Start(context.Background(), redisproc.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	return srv, admin
}

var nearResult = store.Result{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
	Body: []byte(`{"id":"ch_1"}`)}

// complete acquires id and completes it with res.
func completeKey(t *testing.T, s store.Store, id store.ID, res store.Result) int64 {
	t.Helper()
	ctx := context.Background()
	a, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "first", Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Hour})
	if err != nil || !a.Acquired {
		t.Fatalf("Acquire = %+v, %v; want acquired", a, err)
	}
	ref := store.LeaseRef{ID: id, Owner: "first", Fence: a.Record.Fence}
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: res, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return a.Record.Fence
}

func replay(t *testing.T, s store.Store, id store.ID) store.AcquireResult {
	t.Helper()
	a, err := s.Acquire(context.Background(), store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp",
		LeaseDuration: time.Minute, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestNearCacheReplayWithoutRoundTrip counts the commands the server ran
// (INFO commandstats on a private server): a first request runs the
// acquire script alone (no cached read in front of it), the first replay
// one cached read in place of the script, and the replays after it none.
func TestNearCacheReplayWithoutRoundTrip(t *testing.T) {
	srv, admin := privateRedis(t)
	s, err := redisstore.OpenURL("redis://"+srv.Addr+"/0?near_cache=on", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	id := store.ID{Tenant: "t", Key: "replay"}
	// Loads the scripts first: EVALSHA falls back to EVAL once per script.
	completeKey(t, s, store.ID{Tenant: "t", Key: "warm"}, nearResult)

	var fence int64
	calls := commandsBetween(t, admin, func() { fence = completeKey(t, s, id, nearResult) })
	// commandstats counts the commands scripts call too (GET, SET, TIME):
	// a cached read shows as MULTI, PTTL, GET and EXEC.
	if calls["pttl"]+calls["multi"] != 0 || calls["evalsha"]+calls["eval"] != 2 {
		t.Errorf("first request ran %v; want the acquire and complete scripts alone, no cached read", calls)
	}
	calls = commandsBetween(t, admin, func() {
		if a := replay(t, s, id); a.Acquired || a.Record.State != store.StateCompleted || a.Record.Fence != fence {
			t.Errorf("first replay = %+v; want the COMPLETED record of fence %d", a, fence)
		}
	})
	if calls["get"] != 1 || calls["pttl"] != 1 || calls["evalsha"]+calls["eval"] != 0 {
		t.Errorf("first replay ran %v; want one cached GET (in MULTI with PTTL) in place of the script", calls)
	}
	const replays = 50
	calls = commandsBetween(t, admin, func() {
		for range replays {
			a := replay(t, s, id)
			if a.Acquired || a.Record.State != store.StateCompleted || a.Record.Result == nil ||
				string(a.Record.Result.Body) != string(nearResult.Body) || a.Record.Result.Status != nearResult.Status ||
				a.Record.Result.Header.Get("Content-Type") != "application/json" || a.Record.TTL <= 0 || a.Record.TTL > time.Hour {
				t.Fatalf("replay = %+v; want the stored result", a)
			}
		}
	})
	if len(calls) != 0 {
		t.Errorf("%d replays ran %v on the server; want no command at all", replays, calls)
	}
	if st, _ := s.NearCacheStats(); st.Hits < replays || st.Misses != 1 {
		t.Errorf("stats = %+v; want %d hits and 1 miss", st, replays)
	}
	rec, err := s.Get(ctx, id)
	if err != nil || rec.State != store.StateCompleted || rec.Fence != fence {
		t.Errorf("Get = %+v, %v; want the COMPLETED record", rec, err)
	}
}

// TestNearCacheSeesOtherClients: a record deleted by another client, then
// executed again and resolved through it, reaches the near cache as an
// invalidation; the next request after it executes, or sees the new
// result, never the old one.
func TestNearCacheSeesOtherClients(t *testing.T) {
	addr := testRedisAddr(t)
	invalidated := make(chan struct{}, 16)
	cached := cachingClient(t, addr, func([]rueidis.RedisMessage) {
		select {
		case invalidated <- struct{}{}:
		default:
		}
	})
	prefix := testenv.Prefix(t)
	s, err := redisstore.NewRueidis(cached, &redisstore.Options{Prefix: prefix, NearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	other, err := redisstore.New(testenv.Redis(t), &redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	waitInvalidation := func() {
		t.Helper()
		select {
		case <-invalidated:
		case <-time.After(10 * time.Second):
			t.Fatal("no invalidation from Redis within 10s")
		}
	}
	drain := func() {
		for {
			select {
			case <-invalidated:
			default:
				return
			}
		}
	}

	// Deleted by another client: the next request executes.
	id := store.ID{Tenant: "t", Key: "deleted"}
	completeKey(t, s, id, nearResult)
	replay(t, s, id) // fills the cache
	if a, st := replay(t, s, id), hitsOf(s); a.Acquired || st == 0 {
		t.Fatalf("replay = %+v, %d hits; want a cache hit", a, st)
	}
	drain()
	if ok, err := other.Delete(ctx, store.DeleteParams{ID: id}); err != nil || !ok {
		t.Fatalf("Delete through the other client = %v, %v", ok, err)
	}
	waitInvalidation()
	if a := replay(t, s, id); !a.Acquired {
		t.Fatalf("request after the delete = %+v; want it executed (acquired)", a)
	}

	// Completed, cached, then deleted, executed and resolved through the
	// other client with a new result: the next request sees the new one.
	id = store.ID{Tenant: "t", Key: "resolved"}
	oldFence := completeKey(t, s, id, nearResult)
	replay(t, s, id)
	if a := replay(t, s, id); a.Record.Fence != oldFence {
		t.Fatalf("replay = %+v; want fence %d", a, oldFence)
	}
	drain()
	if _, err := other.Delete(ctx, store.DeleteParams{ID: id}); err != nil {
		t.Fatal(err)
	}
	waitInvalidation()
	a, err := other.Acquire(ctx, store.AcquireParams{ID: id, Owner: "second", LeaseDuration: time.Minute, Retention: time.Hour})
	if err != nil || !a.Acquired {
		t.Fatalf("Acquire through the other client = %+v, %v", a, err)
	}
	ref := store.LeaseRef{ID: id, Owner: "second", Fence: a.Record.Fence}
	if err := other.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: ref, Reason: "test", Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, id); err != nil || rec.State != store.StateUnknown {
		t.Fatalf("Get = %+v, %v; want UNKNOWN", rec, err)
	}
	newResult := store.Result{Status: http.StatusOK, Body: []byte("resolved")}
	if err := other.Resolve(ctx, store.ResolveParams{ID: id, Fence: ref.Fence, Result: &newResult, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the script's answer, then cached reads of the new record
		got := replay(t, s, id)
		if got.Record.State != store.StateCompleted || got.Record.Fence != ref.Fence || string(got.Record.Result.Body) != "resolved" {
			t.Fatalf("request after the resolve = %+v; want the resolved result, fence %d", got, ref.Fence)
		}
	}
	if st, _ := s.NearCacheStats(); st.Hits == 0 || st.Stale == 0 {
		t.Errorf("stats = %+v; want hits and a stale read (the deleted record)", st)
	}
}

// TestNearCacheOwnDeleteSeenAtOnce: a delete through the store itself is
// seen by the very next request, without waiting for the invalidation.
func TestNearCacheOwnDeleteSeenAtOnce(t *testing.T) {
	s, err := redisstore.NewRueidis(cachingClient(t, testRedisAddr(t), nil), &redisstore.Options{Prefix: testenv.Prefix(t), NearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		id := store.ID{Tenant: "t", Key: strconv.Itoa(i)}
		completeKey(t, s, id, nearResult)
		replay(t, s, id)
		replay(t, s, id)
		if ok, err := s.Delete(context.Background(), store.DeleteParams{ID: id}); err != nil || !ok {
			t.Fatalf("Delete = %v, %v", ok, err)
		}
		if a := replay(t, s, id); !a.Acquired {
			t.Fatalf("request after the delete = %+v; want it executed", a)
		}
	}
}

func TestNearCacheOptions(t *testing.T) {
	if _, err := redisstore.New(testenv.Redis(t), &redisstore.Options{NearCache: true}); err == nil || !strings.Contains(err.Error(), "rueidis") {
		t.Errorf("New with NearCache = %v; want a refusal that names the client to use", err)
	}
	for _, uri := range []string{
		"redis://127.0.0.1:1/0?near_cache=yes",
		"redis://127.0.0.1:1/0?near_cache_bytes=100",
		"redis://127.0.0.1:1/0?near_cache=on&near_cache_bytes=-1",
		"redis://127.0.0.1:1/0?near_cache=on&pool_sise=3",
	} {
		if _, err := redisstore.OpenURL(uri, nil); err == nil || !strings.Contains(err.Error(), "bad Redis URL") {
			t.Errorf("OpenURL(%q) = %v; want ErrBadURL", uri, err)
		}
	}
	s, err := redisstore.OpenURL(testenv.RedisURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st, on := s.NearCacheStats(); on || st != (redisstore.NearCacheStats{}) {
		t.Errorf("stats without the near cache = %+v, %v; want zero, off", st, on)
	}
}

func hitsOf(s *redisstore.Store) uint64 {
	st, _ := s.NearCacheStats()
	return st.Hits
}

// TestNearCacheFlushedWhenConnectionLost: the server dies and comes back
// empty (no persistence: the record is lost, as a failover to a replica
// that missed it would lose it). The client's cache is emptied when it
// sees the connection end, and the next request after the server is back
// executes instead of replaying the lost record.
func TestNearCacheFlushedWhenConnectionLost(t *testing.T) {
	srv, _ := privateRedis(t)
	flushed := make(chan struct{}, 16)
	c := cachingClient(t, srv.Addr, func(keys []rueidis.RedisMessage) {
		if keys == nil { // the whole cache dropped: its connection ended
			select {
			case flushed <- struct{}{}:
			default:
			}
		}
	})
	s, err := redisstore.NewRueidis(c, &redisstore.Options{Prefix: "flush:", NearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	id := store.ID{Tenant: "t", Key: "lost"}
	completeKey(t, s, id, nearResult)
	replay(t, s, id)
	if a := replay(t, s, id); a.Acquired || hitsOf(s) == 0 {
		t.Fatalf("replay = %+v, %d hits; want a cache hit", a, hitsOf(s))
	}
	srv.Kill()
	select {
	case <-flushed:
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not drop its cache within 30s of the server's death")
	}
	if err := srv.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a := replay(t, s, id); !a.Acquired {
		t.Fatalf("request after the server came back empty = %+v; want it executed", a)
	}
}

// TestClientOption: client=rueidis opens a store on rueidis without the
// near cache, whose cycle works; a client it does not know, the near
// cache on go-redis, a go-redis pool option on rueidis and an option
// given empty or twice are refused, each naming what is wrong.
func TestClientOption(t *testing.T) {
	for uri, want := range map[string]string{
		"redis://127.0.0.1:1/0?client=redigo":                      `client="redigo"`,
		"redis://127.0.0.1:1/0?client=go-redis&near_cache=on":      "near_cache=on with client=go-redis",
		"redis://127.0.0.1:1/0?client=rueidis&pool_size=3":         "pool_size is a go-redis pool option",
		"redis://127.0.0.1:1/0?near_cache=on&read_timeout=1s":      "read_timeout is a go-redis pool option",
		"redis-cluster://127.0.0.1:1?client=rueidis&max_retries=2": "max_retries is a go-redis pool option",
		// Quoted as written, with this package's own options.
		"redis://127.0.0.1:1/0?read_timeout=1s&client=rueidis&pool_size=3": `"redis://127.0.0.1:1/0?read_timeout=1s&client=rueidis&pool_size=3": pool_size is a go-redis pool option`,
		// Empty or repeated, an option says nothing clear: refused, not read
		// as this package's default or as its first value.
		"redis://127.0.0.1:1/0?client=":                         "client= is empty",
		"redis://127.0.0.1:1/0?coalesce=&client=rueidis":        "coalesce= is empty",
		"redis://127.0.0.1:1/0?near_cache=":                     "near_cache= is empty",
		"redis://127.0.0.1:1/0?near_cache=on&near_cache_bytes=": "near_cache_bytes= is empty",
		"redis://127.0.0.1:1/0?coalesce=on&coalesce=off":        "coalesce is given 2 times",
		"redis://127.0.0.1:1/0?client=rueidis&client=go-redis":  "client is given 2 times",
	} {
		if err := redisstore.CheckURL(uri); err == nil || !errors.Is(err, redisstore.ErrBadURL) || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckURL(%q) = %v; want ErrBadURL saying %q", uri, err, want)
		}
	}
	s, err := redisstore.OpenURL(testenv.RedisURL()+"?client=rueidis&coalesce=on", &redisstore.Options{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, on := s.NearCacheStats(); on {
		t.Error("client=rueidis turned the near cache on")
	}
	if _, on := s.CoalesceStats(); !on {
		t.Error("client=rueidis&coalesce=on did not coalesce")
	}
	id := store.ID{Tenant: "t", Key: "client-option"}
	completeKey(t, s, id, nearResult)
	if a := replay(t, s, id); a.Acquired || a.Record.State != store.StateCompleted {
		t.Fatalf("second request = %+v; want the stored result", a)
	}
}
