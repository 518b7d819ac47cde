package redisstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// TestTombstoneCost measures what a tombstone costs Redis (docs/cost-curve.md,
// "Tombstones"): on a private server, used_memory (INFO memory) before and
// after 100,000 keys completed with a key retention, once their records
// are gone (the records' hour of fence grace over: DEL), divided by the
// keys. Keys as the gateway makes them: a 64-hex tenant (the SHA-256 of
// the credentials), a UUID-long key, a 64-hex fingerprint. Opt-in: it
// writes 100,000 keys; IDEM_TOMBSTONE_COST=1 runs it.
func TestTombstoneCost(t *testing.T) {
	if os.Getenv("IDEM_TOMBSTONE_COST") == "" {
		t.Skip("IDEM_TOMBSTONE_COST=1 runs this measurement")
	}
	const n = 100_000
	ctx := context.Background()
	srv, err := redisproc.Start(ctx, redisproc.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Kill()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16, ContextTimeoutEnabled: true})
	defer client.Close()
	s, err := redisstore.New(client, &redisstore.Options{Prefix: "idem:"})
	if err != nil {
		t.Fatal(err)
	}
	used := func() int64 {
		v, err := redisproc.InfoField(ctx, client, "memory", "used_memory")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := strconv.ParseInt(v, 10, 64)
		return b
	}
	hexOf := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tenant := hexOf("Bearer sk_live_client")
	id := func(i int) store.ID {
		return store.ID{Tenant: tenant, Key: fmt.Sprintf("%08d-9c2b-4c1e-a5f3-6e0d1b2c3a4f", i)}
	}
	before := used()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				res, err := s.Acquire(ctx, store.AcquireParams{ID: id(i), Owner: "owner", Fingerprint: hexOf(strconv.Itoa(i)),
					LeaseDuration: time.Minute, Retention: time.Hour})
				if err == nil {
					err = s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: id(i), Owner: "owner", Fence: res.Record.Fence},
						Result: store.Result{Status: 201}, Retention: time.Hour, KeyRetention: 30 * 24 * time.Hour})
				}
				if err == nil {
					err = client.Del(ctx, "idem:"+"{"+strconv.Itoa(len(tenant))+":"+tenant+":"+id(i).Key+"}").Err()
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	keys, err := client.DBSize(ctx).Result()
	if err != nil || keys != n {
		t.Fatalf("%d keys (%v); want the %d tombstones alone", keys, err, n)
	}
	after := used()
	t.Logf("tombstones: %d; used_memory %d -> %d: %.1f bytes per tombstone", n, before, after, float64(after-before)/n)
}
