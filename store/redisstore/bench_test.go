package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// benchWorkers is the number of goroutines that run cycles at once: the
// concurrency the issue asks to compare at.
const benchWorkers = 64

// benchChunk is how many cycles run before the benchmark switches between
// the measured cycle and its baseline. Interleaving them keeps the ratio
// fair on a machine whose load changes during the run.
const benchChunk = 2048

// The naive pattern's TTLs, from the article: a 30 s lock, a 24 h response.
const (
	naiveLock      = 30 * time.Second
	naiveRetention = 24 * time.Hour
)

// benchBody is the stored response: a small JSON body, as a payment API returns.
var benchBody = []byte(`{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","object":"charge","amount":1099,"currency":"usd","status":"succeeded"}`)

var benchHeader = http.Header{"Content-Type": {"application/json"}}

// cycle is one acquire+complete of key i.
type cycle = storekit.Call

// benchPace runs the cycles of a benchmark and its baselines
// (storekit.Compare): benchWorkers at once, benchChunk at a time.
var benchPace = storekit.Pace{Workers: benchWorkers, Chunk: benchChunk}

// The hand-written EVALSHA pair the issue measured: a lock taken by a
// script, and a response stored by a script that checks the lock's owner.
// No fence, no fingerprint, no record to replay: the least two scripts do.
const (
	pairLockLua  = `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`
	pairStoreLua = `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1`
)

// client is one Redis client under test, with the naive pattern and the
// EVALSHA pair written in it.
type client struct {
	name  string
	naive func(prefix string) cycle
	pair  func(prefix string) cycle
	store func(prefix string) (*redisstore.Store, error)
	// coalescing is store with Options.Coalesce.
	coalescing func(prefix string) (*redisstore.Store, error)
}

func benchClients(b *testing.B) []client {
	gr := testenv.Redis(b) // PoolSize 128: every worker has its own connection
	rd := rueidisClient(b) // default options: auto-pipelining
	return []client{
		{
			name: "go-redis",
			naive: func(prefix string) cycle {
				return func(ctx context.Context, i int64) error {
					key := prefix + strconv.FormatInt(i, 10)
					ok, err := gr.SetNX(ctx, key, "LOCKED", naiveLock).Result()
					if err != nil || !ok {
						return fmt.Errorf("naive lock %s: %v, %v", key, ok, err)
					}
					return gr.Set(ctx, "response:"+key, benchBody, naiveRetention).Err()
				}
			},
			pair: func(prefix string) cycle {
				lock, store := redis.NewScript(pairLockLua), redis.NewScript(pairStoreLua)
				return func(ctx context.Context, i int64) error {
					key := prefix + strconv.FormatInt(i, 10)
					if err := lock.Run(ctx, gr, []string{key}, "owner", naiveLock.Milliseconds()).Err(); err != nil {
						return fmt.Errorf("pair lock %s: %w", key, err)
					}
					n, err := store.Run(ctx, gr, []string{key, key + ":r"}, "owner", benchBody, naiveRetention.Milliseconds()).Int()
					if err != nil || n != 1 {
						return fmt.Errorf("pair store %s: %d, %v", key, n, err)
					}
					return nil
				}
			},
			store: func(prefix string) (*redisstore.Store, error) {
				return redisstore.New(gr, &redisstore.Options{Prefix: prefix})
			},
			coalescing: func(prefix string) (*redisstore.Store, error) {
				return redisstore.New(gr, &redisstore.Options{Prefix: prefix, Coalesce: true})
			},
		},
		{
			name: "rueidis",
			naive: func(prefix string) cycle {
				return func(ctx context.Context, i int64) error {
					key := prefix + strconv.FormatInt(i, 10)
					err := rd.Do(ctx, rd.B().Set().Key(key).Value("LOCKED").Nx().Px(naiveLock).Build()).Error()
					if err != nil { // rueidis.Nil: the key was held
						return fmt.Errorf("naive lock %s: %w", key, err)
					}
					return rd.Do(ctx, rd.B().Set().Key("response:"+key).Value(rueidis.BinaryString(benchBody)).
						Px(naiveRetention).Build()).Error()
				}
			},
			pair: func(prefix string) cycle {
				lock, store := rueidis.NewLuaScript(pairLockLua), rueidis.NewLuaScript(pairStoreLua)
				lockMs, storeMs := strconv.FormatInt(naiveLock.Milliseconds(), 10), strconv.FormatInt(naiveRetention.Milliseconds(), 10)
				return func(ctx context.Context, i int64) error {
					key := prefix + strconv.FormatInt(i, 10)
					if err := lock.Exec(ctx, rd, []string{key}, []string{"owner", lockMs}).Error(); err != nil {
						return fmt.Errorf("pair lock %s: %w", key, err)
					}
					n, err := store.Exec(ctx, rd, []string{key, key + ":r"}, []string{"owner", rueidis.BinaryString(benchBody), storeMs}).AsInt64()
					if err != nil || n != 1 {
						return fmt.Errorf("pair store %s: %d, %v", key, n, err)
					}
					return nil
				}
			},
			store: func(prefix string) (*redisstore.Store, error) {
				return redisstore.NewRueidis(rd, &redisstore.Options{Prefix: prefix})
			},
			coalescing: func(prefix string) (*redisstore.Store, error) {
				return redisstore.NewRueidis(rd, &redisstore.Options{Prefix: prefix, Coalesce: true})
			},
		},
	}
}

// engineCycle is Begin then Lease.Complete: what a request that does the
// work costs, heartbeat goroutine included.
func engineCycle(e *idem.Engine) cycle {
	return func(ctx context.Context, i int64) error {
		att, err := e.Begin(ctx, idem.Request{Tenant: "bench", Key: strconv.FormatInt(i, 10), Fingerprint: "fp"})
		if err != nil {
			return err
		}
		if att.Outcome != idem.Acquired {
			return fmt.Errorf("key %d: %v, want acquired", i, att.Outcome)
		}
		return att.Lease.Complete(ctx, store.Result{Status: http.StatusCreated, Header: benchHeader, Body: benchBody})
	}
}

// storeCycle is Store.Acquire then Store.Complete without the engine: the
// store's share of engineCycle.
func storeCycle(s store.Store) cycle {
	return func(ctx context.Context, i int64) error {
		id := store.ID{Tenant: "bench", Key: strconv.FormatInt(i, 10)}
		res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "owner-" + id.Key, Fingerprint: "fp", LeaseDuration: naiveLock})
		if err != nil {
			return err
		}
		if !res.Acquired {
			return fmt.Errorf("key %d: not acquired", i)
		}
		return s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: id, Owner: "owner-" + id.Key, Fence: res.Record.Fence},
			Result: store.Result{Status: http.StatusCreated, Header: benchHeader, Body: benchBody}, Retention: naiveRetention})
	}
}

// BenchmarkCycle compares, per client and at 64 goroutines, the engine's
// acquire+complete cycle (and the bare store's) with the article's naive
// pattern on the same client: SET key LOCKED NX PX 30000, then SET
// response:key body PX 86400000. x_naive above 1 means faster than the
// naive pattern. The rueidis cycles are also compared with the naive
// pattern on go-redis (x_naive_goredis), the client most users hold.
// The engine-coalesce rows run the engine on a store with
// Options.Coalesce, also against the plain engine on the same client
// (x_engine), and report the batches' mean size (ops/batch).
func BenchmarkCycle(b *testing.B) {
	clients := benchClients(b)
	goredisNaive := clients[0].naive
	for _, c := range clients {
		baselines := func(prefix string) []storekit.Baseline {
			bs := []storekit.Baseline{{Name: "naive", Call: c.naive(prefix + "naive:")}, {Name: "pair", Call: c.pair(prefix + "pair:")}}
			if c.name != "go-redis" {
				bs = append(bs, storekit.Baseline{Name: "naive_goredis", Call: goredisNaive(prefix + "naive-goredis:")})
			}
			return bs
		}
		b.Run(c.name+"/engine", func(b *testing.B) {
			prefix := testenv.Prefix(b)
			storekit.Compare(b, benchPace, engineCycle(benchEngine(b, c.store, prefix)), baselines(prefix)...)
			cleanup(b, prefix)
		})
		b.Run(c.name+"/engine-coalesce", func(b *testing.B) {
			prefix := testenv.Prefix(b)
			s, err := c.coalescing(prefix)
			if err != nil {
				b.Fatal(err)
			}
			e, err := idem.New(s, &idem.Options{LeaseDuration: naiveLock, Retention: naiveRetention})
			if err != nil {
				b.Fatal(err)
			}
			plain := engineCycle(benchEngine(b, c.store, prefix+"plain:"))
			storekit.Compare(b, benchPace, engineCycle(e), append(baselines(prefix), storekit.Baseline{Name: "engine", Call: plain})...)
			if st, _ := s.CoalesceStats(); st.Batches > 0 {
				b.ReportMetric(float64(st.Carried)/float64(st.Batches), "ops/batch")
				b.ReportMetric(float64(st.Carried)/float64(st.Carried+st.Single), "batched-share")
			}
			cleanup(b, prefix)
		})
		b.Run(c.name+"/store", func(b *testing.B) {
			prefix := testenv.Prefix(b)
			s, err := c.store(prefix)
			if err != nil {
				b.Fatal(err)
			}
			storekit.Compare(b, benchPace, storeCycle(s), baselines(prefix)...)
			cleanup(b, prefix)
		})
	}
}

// benchEngine is an engine on the store made by newStore, with renewal as
// in production (every Lease/3): it never fires within a cycle, but its
// timer is part of the cost.
func benchEngine(b *testing.B, newStore func(prefix string) (*redisstore.Store, error), prefix string) *idem.Engine {
	s, err := newStore(prefix)
	if err != nil {
		b.Fatal(err)
	}
	e, err := idem.New(s, &idem.Options{LeaseDuration: naiveLock, Retention: naiveRetention})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// cleanup deletes the keys a benchmark wrote under prefix (the naive
// responses included), which would otherwise stay for a day.
func cleanup(b *testing.B, prefix string) {
	b.StopTimer()
	c := testenv.Redis(b)
	ctx := context.Background()
	for _, pattern := range []string{prefix + "*", "response:" + prefix + "*"} {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 1000 {
				if err := c.Unlink(ctx, batch...).Err(); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			b.Fatal(err)
		}
		if len(batch) > 0 {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
