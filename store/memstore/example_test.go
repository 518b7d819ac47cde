package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// A memory store bounded to 64 MiB under an engine that keeps results for
// an hour. The store's clock is injected, as a test does, to show the
// retention end without waiting for it: the work runs once, is replayed,
// and runs again only once its result has expired.
func ExampleNew() {
	start := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	now := start
	store, err := memstore.New(&memstore.Options{
		MaxBytes: 64 << 20,
		Clock:    func() time.Time { return now }, // nil means time.Now
	})
	if err != nil {
		panic(err)
	}
	engine, err := idem.New(store, &idem.Options{Retention: time.Hour})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	runs := 0
	report := func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
		runs++
		return fmt.Appendf(nil, "report #%d", runs), nil
	}

	req := idem.Request{Tenant: "acme", Key: "nightly-report-2026-12-01", NoFingerprint: true}
	for _, at := range []time.Duration{0, 30 * time.Minute, 2 * time.Hour} {
		now = start.Add(at) // the store's clock moves; nothing sleeps
		out, replayed, err := engine.Do(ctx, req, report)
		fmt.Printf("+%v: %s replayed=%t err=%v\n", at, out, replayed, err)
	}
	// Output:
	// +0s: report #1 replayed=false err=<nil>
	// +30m0s: report #1 replayed=true err=<nil>
	// +2h0m0s: report #2 replayed=false err=<nil>
}
