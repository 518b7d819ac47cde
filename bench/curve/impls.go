package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/redisrecord"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
)

// The naive pattern's TTLs, from the article: a 30 s lock, a 24 h
// response. Every implementation uses them.
const (
	lockTTL   = 30 * time.Second
	retention = 24 * time.Hour
)

// body is the stored response: a small JSON body, as a payment API returns
// (the same as the store benchmarks').
var (
	body   = []byte(`{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","object":"charge","amount":1099,"currency":"usd","status":"succeeded"}`)
	header = http.Header{"Content-Type": {"application/json"}}
)

// cycle is one request's worth of work on key i of a run.
type cycle func(ctx context.Context, i int64) error

// impl is one implementation on the curve.
type impl struct {
	name string
	// backend names what holds its records; implementations on one
	// backend share the pre-filled records and their memory figure.
	backend string
	// cycle returns the cycle of a run whose keys are tagged tag.
	cycle func(tag string) cycle
	// clean deletes what cycles 0..n-1 of the run tagged tag wrote, so
	// that every point starts with the same stored keys.
	clean func(ctx context.Context, tag string, n int64) error
}

// backend is where pre-filled records live.
type backend struct {
	name string
	// fill adds the stored records numbered from..to-1, as the backend's
	// implementations write them.
	fill func(ctx context.Context, from, to int64) error
	// size returns the bytes the backend uses, for memory per record.
	size func(ctx context.Context) (int64, error)
	// measuredBy says what size counts.
	measuredBy string
	// drop, when not nil, makes the backend's stored records transient:
	// they live in this process's heap, where they would make every other
	// implementation's garbage collections slower. A fill then adds all
	// the records, is measured, and is dropped (drop deletes records
	// 0..n-1); the implementation's runs fill them again before and drop
	// them after (see measurePoint).
	drop func(ctx context.Context, n int64) error
}

// Redis databases of the private server: each backend has its own, so the
// stored keys of one do not add to another's keyspace.
const (
	dbNaive     = 1
	dbRedislock = 2
	dbIdem      = 3
)

// keyPrefix starts every Redis key the command writes.
const keyPrefix = "curve:"

// redisSetup holds the clients on the private Redis server.
type redisSetup struct {
	naive, redislock, idem *redis.Client
	rueidis                rueidis.Client // on dbIdem
	rueidisNaive           rueidis.Client // on dbNaive
}

func newRedis(addr string, poolSize int) (*redisSetup, error) {
	client := func(db int) *redis.Client {
		return redis.NewClient(&redis.Options{Addr: addr, DB: db, PoolSize: poolSize, MinIdleConns: 0, ContextTimeoutEnabled: true})
	}
	// Default options otherwise: auto-pipelining, as the store benchmarks.
	rd, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, SelectDB: dbIdem, DisableCache: true})
	if err != nil {
		return nil, fmt.Errorf("rueidis: %w", err)
	}
	rn, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, SelectDB: dbNaive, DisableCache: true})
	if err != nil {
		rd.Close()
		return nil, fmt.Errorf("rueidis: %w", err)
	}
	return &redisSetup{naive: client(dbNaive), redislock: client(dbRedislock), idem: client(dbIdem), rueidis: rd, rueidisNaive: rn}, nil
}

func (r *redisSetup) close() {
	r.naive.Close()
	r.redislock.Close()
	r.idem.Close()
	r.rueidis.Close()
	r.rueidisNaive.Close()
}

// usedMemory is Redis's INFO memory used_memory: the whole server's, so a
// backend's share is the delta across its fill.
func (r *redisSetup) usedMemory(ctx context.Context) (int64, error) {
	info, err := r.naive.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("no used_memory in INFO memory")
}

func naiveKey(tag string, i int64) string {
	return keyPrefix + tag + ":" + strconv.FormatInt(i, 10)
}

// naiveImpl is the article's pattern on go-redis: SET key LOCKED NX EX 30,
// then SET response:key body EX 86400. The lock stays until it expires.
func naiveImpl(r *redisSetup) impl {
	c := r.naive
	return impl{
		name: "naive", backend: "redis-naive",
		cycle: func(tag string) cycle {
			return func(ctx context.Context, i int64) error {
				key := naiveKey(tag, i)
				ok, err := c.SetNX(ctx, key, "LOCKED", lockTTL).Result()
				if err != nil || !ok {
					return fmt.Errorf("naive lock %s: %v, %v", key, ok, err)
				}
				return c.Set(ctx, "response:"+key, body, retention).Err()
			}
		},
		clean: func(ctx context.Context, tag string, n int64) error {
			return unlink(ctx, c, n, func(i int64) []string {
				return []string{naiveKey(tag, i), "response:" + naiveKey(tag, i)}
			})
		},
	}
}

// naiveRueidisImpl is the naive pattern on rueidis, for comparing idem's
// rueidis store with the same client. Its records are the naive ones.
func naiveRueidisImpl(r *redisSetup) impl {
	c := r.rueidisNaive
	return impl{
		name: "naive-rueidis", backend: "redis-naive",
		cycle: func(tag string) cycle {
			return func(ctx context.Context, i int64) error {
				key := naiveKey(tag, i)
				err := c.Do(ctx, c.B().Set().Key(key).Value("LOCKED").Nx().Ex(lockTTL).Build()).Error()
				if err != nil { // rueidis.Nil: the key was held
					return fmt.Errorf("naive lock %s: %w", key, err)
				}
				return c.Do(ctx, c.B().Set().Key("response:"+key).Value(rueidis.BinaryString(body)).Ex(retention).Build()).Error()
			}
		},
		clean: func(ctx context.Context, tag string, n int64) error {
			return unlink(ctx, r.naive, n, func(i int64) []string {
				return []string{naiveKey(tag, i), "response:" + naiveKey(tag, i)}
			})
		},
	}
}

// releaseLua is redislock's release: delete the lock only if it still holds
// this holder's token.
const releaseLua = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// redislockImpl is the pattern of bsm/redislock used for idempotency, on
// go-redis: obtain (SET key token NX PX 30000, with a random token), store
// the response (SET response:key body PX 86400000), release (EVALSHA of a
// compare-and-delete). One round trip more than the naive pattern, and
// the lock no longer outlives the request.
func redislockImpl(r *redisSetup) impl {
	c := r.redislock
	release := redis.NewScript(releaseLua)
	return impl{
		name: "redislock", backend: "redis-redislock",
		cycle: func(tag string) cycle {
			return func(ctx context.Context, i int64) error {
				key := naiveKey(tag, i)
				var tok [16]byte
				rand.Read(tok[:])
				token := base64.RawURLEncoding.EncodeToString(tok[:])
				ok, err := c.SetNX(ctx, key, token, lockTTL).Result()
				if err != nil || !ok {
					return fmt.Errorf("redislock obtain %s: %v, %v", key, ok, err)
				}
				if err := c.Set(ctx, "response:"+key, body, retention).Err(); err != nil {
					return err
				}
				n, err := release.Run(ctx, c, []string{key}, token).Int()
				if err != nil || n != 1 {
					return fmt.Errorf("redislock release %s: %d, %v", key, n, err)
				}
				return nil
			}
		},
		clean: func(ctx context.Context, tag string, n int64) error {
			return unlink(ctx, c, n, func(i int64) []string { return []string{"response:" + naiveKey(tag, i)} })
		},
	}
}

// responseBackend is the naive and redislock records: what remains of a
// request once its lock is gone, its response key.
func responseBackend(name string, c *redis.Client, r *redisSetup) backend {
	return backend{
		name: name, measuredBy: "Redis INFO used_memory",
		fill: func(ctx context.Context, from, to int64) error {
			return pipelined(ctx, c, from, to, func(p redis.Pipeliner, i int64) {
				p.Set(ctx, "response:"+naiveKey("fill", i), body, retention)
			})
		},
		size: r.usedMemory,
	}
}

// engineCycle is Engine.Begin then Lease.Complete: what a request that
// does the work costs idem, heartbeat timer included.
func engineCycle(e *idem.Engine, tag string) cycle {
	return func(ctx context.Context, i int64) error {
		att, err := e.Begin(ctx, idem.Request{Tenant: tag, Key: strconv.FormatInt(i, 10), Fingerprint: "fp"})
		if err != nil {
			return err
		}
		if att.Outcome != idem.Acquired {
			return fmt.Errorf("key %s/%d: %v, want acquired", tag, i, att.Outcome)
		}
		return att.Lease.Complete(ctx, store.Result{Status: http.StatusCreated, Header: header, Body: body})
	}
}

func newEngine(s store.Store) (*idem.Engine, error) {
	return idem.New(s, &idem.Options{LeaseDuration: lockTTL, Retention: retention})
}

func engineImpl(name, backend string, s store.Store, clean func(ctx context.Context, tag string, n int64) error) (impl, error) {
	e, err := newEngine(s)
	if err != nil {
		return impl{}, err
	}
	return impl{name: name, backend: backend, cycle: func(tag string) cycle { return engineCycle(e, tag) }, clean: clean}, nil
}

// idemRedis returns idem on the Redis store through go-redis and through
// rueidis (one backend: the same records), and the backend.
func idemRedis(r *redisSetup) ([]impl, backend, error) {
	gs, err := redisstore.New(r.idem, &redisstore.Options{Prefix: keyPrefix})
	if err != nil {
		return nil, backend{}, err
	}
	rs, err := redisstore.NewRueidis(r.rueidis, &redisstore.Options{Prefix: keyPrefix})
	if err != nil {
		return nil, backend{}, err
	}
	clean := func(ctx context.Context, tag string, n int64) error {
		return unlink(ctx, r.idem, n, func(i int64) []string {
			return []string{redisrecord.Key(keyPrefix, store.ID{Tenant: tag, Key: strconv.FormatInt(i, 10)})}
		})
	}
	g, err := engineImpl("idem-redis-goredis", "redis-idem", gs, clean)
	if err != nil {
		return nil, backend{}, err
	}
	ru, err := engineImpl("idem-redis-rueidis", "redis-idem", rs, clean)
	if err != nil {
		return nil, backend{}, err
	}
	b := backend{
		name: "redis-idem", measuredBy: "Redis INFO used_memory",
		// One record written by the store, then copied with DUMP and
		// RESTORE (same encoding, same TTL): much faster than a store
		// cycle per record, and byte for byte what the store writes.
		fill: func(ctx context.Context, from, to int64) error {
			if from >= to {
				return nil
			}
			tmpl, err := fillTemplate(ctx, gs)
			if err != nil {
				return err
			}
			k := redisrecord.Key(keyPrefix, tmpl)
			dump, err := r.idem.Dump(ctx, k).Result()
			if err != nil {
				return err
			}
			ttl, err := r.idem.PTTL(ctx, k).Result()
			if err != nil {
				return err
			}
			if err := r.idem.Unlink(ctx, k).Err(); err != nil {
				return err
			}
			return pipelined(ctx, r.idem, from, to, func(p redis.Pipeliner, i int64) {
				p.RestoreReplace(ctx, redisrecord.Key(keyPrefix, store.ID{Tenant: "fill", Key: strconv.FormatInt(i, 10)}), ttl, dump)
			})
		},
		size: r.usedMemory,
	}
	return []impl{g, ru}, b, nil
}

// storeCycle is one acquire+complete of id on s, without the engine.
func storeCycle(ctx context.Context, s store.Store, id store.ID) error {
	res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "owner", Fingerprint: "fp", LeaseDuration: lockTTL})
	if err != nil {
		return err
	}
	if !res.Acquired {
		return fmt.Errorf("%v: not acquired", id)
	}
	return s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: id, Owner: "owner", Fence: res.Record.Fence},
		Result: store.Result{Status: http.StatusCreated, Header: header, Body: body}, Retention: retention})
}

// fillTemplate writes, through s, the record that a fill copies (so that
// every copy is byte for byte what the store writes), and returns its ID.
func fillTemplate(ctx context.Context, s store.Store) (store.ID, error) {
	id := store.ID{Tenant: "fill", Key: "template"}
	if err := storeCycle(ctx, s, id); err != nil {
		return id, fmt.Errorf("template record: %w", err)
	}
	return id, nil
}

// idemMemory returns idem on the memory store, and its backend, whose size
// is the Go heap after a collection.
func idemMemory() (impl, backend, error) {
	s, err := memstore.New(&memstore.Options{MaxBytes: 1 << 40, TenantShare: 1}) // the sweep's records, not the default bound
	if err != nil {
		return impl{}, backend{}, err
	}
	i, err := engineImpl("idem-memory", "memory", s, func(ctx context.Context, tag string, n int64) error {
		for i := range n {
			if _, err := s.Delete(ctx, store.DeleteParams{ID: store.ID{Tenant: tag, Key: strconv.FormatInt(i, 10)}}); err != nil {
				return err
			}
		}
		return nil
	})
	b := backend{
		name: "memory", measuredBy: "Go heap in use after GC",
		fill: func(ctx context.Context, from, to int64) error {
			for i := from; i < to; i++ {
				if err := storeCycle(ctx, s, store.ID{Tenant: "fill", Key: strconv.FormatInt(i, 10)}); err != nil {
					return err
				}
			}
			return nil
		},
		drop: func(ctx context.Context, n int64) error {
			for i := range n {
				if _, err := s.Delete(ctx, store.DeleteParams{ID: store.ID{Tenant: "fill", Key: strconv.FormatInt(i, 10)}}); err != nil {
					return err
				}
			}
			return nil
		},
		size: func(context.Context) (int64, error) {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return int64(m.HeapAlloc), nil
		},
	}
	return i, b, err
}

// pipelineBatch is how many commands go in one pipeline.
const pipelineBatch = 1000

// pipelined runs add for every i in from..to-1 in pipelines.
func pipelined(ctx context.Context, c *redis.Client, from, to int64, add func(redis.Pipeliner, int64)) error {
	for lo := from; lo < to; lo += pipelineBatch {
		p := c.Pipeline()
		for i := lo; i < min(lo+pipelineBatch, to); i++ {
			add(p, i)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// unlink deletes the keys of cycles 0..n-1.
func unlink(ctx context.Context, c *redis.Client, n int64, keys func(int64) []string) error {
	for lo := int64(0); lo < n; lo += pipelineBatch {
		var ks []string
		for i := lo; i < min(lo+pipelineBatch, n); i++ {
			ks = append(ks, keys(i)...)
		}
		if err := c.Unlink(ctx, ks...).Err(); err != nil {
			return err
		}
	}
	return nil
}
