package pgstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
)

// BenchmarkAcquireComplete measures the store's acquire+complete cycle
// against a hand-written pgx INSERT ... ON CONFLICT DO NOTHING + UPDATE
// pair on the same pool, interleaved in one run. x-of-handwritten is the
// store's throughput as a fraction of the hand-written pair's (total times);
// x-of-handwritten-median is the same ratio of the median cycles, which a
// few cycles stalled by other load on the machine do not move.
func BenchmarkAcquireComplete(b *testing.B) {
	s := newStore(b)
	ctx := context.Background()
	pool := s.Pool()
	if _, err := pool.Exec(ctx, `CREATE TABLE naive (tenant_id text, idempotency_key text, done boolean NOT NULL DEFAULT false,
		status int, body bytea, PRIMARY KEY (tenant_id, idempotency_key))`); err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"id":"ch_1","amount":4200}`)
	run := b.Name() // keys unique to this run of the benchmark function
	var storeTime, naiveTime time.Duration
	var storeCycles, naiveCycles []time.Duration
	for i := 0; b.Loop(); i++ {
		key := fmt.Sprint(run, i)

		start := time.Now()
		tag, err := pool.Exec(ctx, `INSERT INTO naive (tenant_id, idempotency_key) VALUES ($1, $2) ON CONFLICT DO NOTHING`, "t", key)
		if err != nil || tag.RowsAffected() != 1 {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE naive SET done = true, status = $3, body = $4 WHERE tenant_id = $1 AND idempotency_key = $2`, "t", key, 200, body); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		naiveTime += d
		naiveCycles = append(naiveCycles, d)

		start = time.Now()
		res, err := s.Acquire(ctx, store.AcquireParams{ID: store.ID{Tenant: "t", Key: key}, Owner: "o", Fingerprint: "fp", LeaseDuration: time.Minute})
		if err != nil || !res.Acquired {
			b.Fatal(err)
		}
		ref := store.LeaseRef{ID: res.Record.ID, Owner: "o", Fence: res.Record.Fence}
		if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 200, Body: body}, Retention: time.Hour}); err != nil {
			b.Fatal(err)
		}
		d = time.Since(start)
		storeTime += d
		storeCycles = append(storeCycles, d)
	}
	b.ReportMetric(float64(storeTime.Nanoseconds())/float64(b.N), "store-ns/cycle")
	b.ReportMetric(float64(naiveTime.Nanoseconds())/float64(b.N), "handwritten-ns/cycle")
	b.ReportMetric(float64(naiveTime)/float64(storeTime), "x-of-handwritten")
	b.ReportMetric(float64(median(naiveCycles))/float64(median(storeCycles)), "x-of-handwritten-median")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
