package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// BenchmarkFCALL measures the store's acquire+complete cycle with its
// scripts run as a Redis 7 function library (Options.Functions: FCALL)
// against the same store by EVALSHA, on one rueidis client, 64
// goroutines, interleaved in the same run: x_evalsha above 1 means FCALL
// is faster.
//
//	go test -run '^$' -bench FCALL -benchtime 40000x -count 5 ./store/redisstore/
func BenchmarkFCALL(b *testing.B) {
	c := rueidisClient(b)
	store := func(functions bool) cycle {
		s, err := redisstore.NewRueidis(c, &redisstore.Options{Prefix: testenv.Prefix(b), Functions: functions})
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, i int64) error {
			id := store.ID{Tenant: "bench", Key: "k" + strconv.FormatInt(i, 10)}
			res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", Fingerprint: "fp",
				LeaseDuration: naiveLock, Retention: naiveRetention})
			if err != nil {
				return err
			}
			return s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: id, Owner: "o", Fence: res.Record.Fence},
				Result: store.Result{Status: 200, Header: benchHeader, Body: benchBody}, Retention: naiveRetention})
		}
	}
	fcall, evalsha := store(true), store(false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fcall(ctx, -1); err != nil { // loads the library
		b.Fatal(err)
	}
	storekit.Compare(b, benchPace, fcall, storekit.Baseline{Name: "evalsha", Call: evalsha})
}
