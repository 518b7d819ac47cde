package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// BenchmarkNearCache serves a hello-world handler over loopback HTTP, bare
// and behind the middleware on Redis, at 2 and 64 concurrent clients, with
// replays (one key) and with unique keys (every request runs the handler),
// on the ways to reach Redis: go-redis and rueidis, each also with
// coalesced scripts, and rueidis with the near cache, and on the memory
// store (the ceiling: no network); and, as the peer, behind the naive lock
// a team writes instead (naiveMiddleware). Batches to the bare handler
// (untimed) and to the
// protected one (timed) alternate, and x-bare is the protected one's
// requests per second as a fraction of the bare handler's in the same run
// (1.0 = no cost).
//
//	go test -run '^$' -bench NearCache -benchtime 4000x ./store/redisstore/
func BenchmarkNearCache(b *testing.B) {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello, world\n")
	})
	stores := []struct {
		name string
		new  func(b *testing.B) store.Store
	}{
		{"memory", func(b *testing.B) store.Store { // the ceiling: no network at all
			s, err := memstore.New(&memstore.Options{TenantShare: 1}) // one tenant's keys
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"go-redis", func(b *testing.B) store.Store {
			s, err := redisstore.New(testenv.Redis(b), &redisstore.Options{Prefix: testenv.Prefix(b)})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"rueidis", func(b *testing.B) store.Store {
			s, err := redisstore.NewRueidis(rueidisClient(b), &redisstore.Options{Prefix: testenv.Prefix(b)})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"go-redis-coalesce", func(b *testing.B) store.Store {
			s, err := redisstore.New(testenv.Redis(b), &redisstore.Options{Prefix: testenv.Prefix(b), Coalesce: true})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"rueidis-coalesce", func(b *testing.B) store.Store {
			s, err := redisstore.NewRueidis(rueidisClient(b), &redisstore.Options{Prefix: testenv.Prefix(b), Coalesce: true})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"rueidis-nearcache", func(b *testing.B) store.Store {
			s, err := redisstore.NewRueidis(cachingClient(b, testRedisAddr(b), nil),
				&redisstore.Options{Prefix: testenv.Prefix(b), NearCache: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				st, _ := s.NearCacheStats()
				b.Logf("near cache: %+v", st)
			})
			return s
		}},
	}
	for _, clients := range []int{2, 64} {
		for _, mode := range []string{"replay", "unique"} {
			key := func(i int64) string { return "k" + strconv.FormatInt(i, 10) }
			if mode == "replay" {
				key = func(int64) string { return "same" }
			}
			for _, st := range stores {
				b.Run(fmt.Sprintf("c%d/%s/%s", clients, mode, st.name), func(b *testing.B) {
					e, err := idem.New(st.new(b), &idem.Options{Retention: time.Hour})
					if err != nil {
						b.Fatal(err)
					}
					mw, err := idemhttp.New(e, nil)
					if err != nil {
						b.Fatal(err)
					}
					benchHTTP(b, clients, hello, mw(hello), key)
				})
			}
			// The peer: the lock a team writes instead.
			b.Run(fmt.Sprintf("c%d/%s/naive-go-redis", clients, mode), func(b *testing.B) {
				prefix := testenv.Prefix(b)
				defer cleanup(b, prefix)
				benchHTTP(b, clients, hello, naiveMiddleware(testenv.Redis(b), prefix)(hello), key)
			})
		}
	}
}

// naiveMiddleware is the middleware a team writes instead of idem, the
// article's naive lock as bench/gateway's naive gateway runs it: SET key
// LOCKED NX PX 30000, run the handler, SET response:key to the body for
// 24 h; on a taken key, GET response:key and replay it, or 409 while
// there is none. go-redis, the client most teams hold. No owner, fence,
// fingerprint, tenant, status, header or UNKNOWN state.
func naiveMiddleware(c *redis.Client, prefix string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, ctx := prefix+r.Header.Get(idemhttp.HeaderKey), r.Context()
			ok, err := c.SetNX(ctx, key, "LOCKED", naiveLock).Result()
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			if !ok {
				body, err := c.Get(ctx, "response:"+key).Bytes()
				if err != nil {
					http.Error(w, "in progress", http.StatusConflict)
					return
				}
				w.Write(body)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			if err := c.Set(ctx, "response:"+key, rec.Body.Bytes(), naiveRetention).Err(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			maps.Copy(w.Header(), rec.Header())
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
		})
	}
}

// benchHTTP sends b.N timed POSTs to h from clients goroutines, with
// the keys key gives, each batch after an untimed batch of as many to bare
// (no key), and reports the ratio of their times as x-bare.
func benchHTTP(b *testing.B, clients int, bare, h http.Handler, key func(int64) string) {
	batch := max(200, 8*clients)
	bareSrv, srv := httptest.NewServer(bare), httptest.NewServer(h)
	defer bareSrv.Close()
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	const body = `{"amount":100,"currency":"EUR"}`
	send := func(url string, k string) {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", url+"/pay", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if k != "" {
			req.Header.Set(idemhttp.HeaderKey, k)
			req.Header.Set("Authorization", "Bearer bench") // a keyed request needs a tenant: 400 tenant_missing without one
		}
		res, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b.Errorf("status %d", res.StatusCode)
		}
	}
	var seq atomic.Int64
	run := func(url string, n int, key func(int64) string) time.Duration {
		start := time.Now()
		var left atomic.Int64
		left.Store(int64(n))
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					k := ""
					if key != nil {
						k = key(seq.Add(1))
					}
					send(url, k)
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	send(srv.URL, key(0))        // the replay's first execution, alone
	run(bareSrv.URL, batch, nil) // warm connections
	run(srv.URL, batch, key)     // and the cache
	var bareTime, time time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		b.StopTimer()
		bareTime += run(bareSrv.URL, n, nil)
		b.StartTimer()
		time += run(srv.URL, n, key)
	}
	b.StopTimer()
	b.ReportMetric(float64(bareTime)/float64(time), "x-bare")
}
