package layered_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// BenchmarkReplay measures a replay (Acquire of a COMPLETED key) through
// the layered store against the Redis store's, interleaved in one run.
// x-of-redisstore is the layered store's throughput as a fraction of the
// Redis store's.
func BenchmarkReplay(b *testing.B) {
	client := testenv.Redis(b)
	prefix := testenv.Prefix(b)
	l := newLayered(b, client, newPG(b), prefix+"l:")
	r, err := redisstore.New(client, &redisstore.Options{Prefix: prefix + "r:"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	id := store.ID{Tenant: "acme", Key: "order-1"}
	body := []byte(`{"id":"ch_1","amount":4200}`)
	for _, s := range []store.Store{l, r} {
		res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", Fingerprint: "fp", LeaseDuration: time.Minute})
		if err != nil || !res.Acquired {
			b.Fatal(err)
		}
		ref := store.LeaseRef{ID: id, Owner: "o", Fence: res.Record.Fence}
		if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 200, Body: body}, Retention: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { deletePrefix(b, client, prefix) })
	replay := func(s store.Store) time.Duration {
		start := time.Now()
		res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "x", Fingerprint: "fp", LeaseDuration: time.Minute})
		if err != nil || res.Acquired || res.Record.State != store.StateCompleted {
			b.Fatalf("replay = %+v, %v", res, err)
		}
		return time.Since(start)
	}
	var layeredTime, redisTime time.Duration
	for b.Loop() {
		redisTime += replay(r)
		layeredTime += replay(l)
	}
	b.ReportMetric(float64(layeredTime.Nanoseconds())/float64(b.N), "layered-ns/replay")
	b.ReportMetric(float64(redisTime.Nanoseconds())/float64(b.N), "redisstore-ns/replay")
	b.ReportMetric(float64(redisTime)/float64(layeredTime), "x-of-redisstore")
}
