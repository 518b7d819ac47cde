package idem_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// printObserver prints what the engine does. A real Observer counts the
// calls and their latency in a metrics registry, and opens a trace span
// per store call under the span in ctx.
type printObserver struct{}

func (printObserver) StoreCall(ctx context.Context, op string, elapsed time.Duration, err error) {
	fmt.Printf("store %s: err=%v\n", op, err)
}

func (printObserver) LeaseEvent(id idem.ID, ev idem.LeaseEvent) {
	fmt.Printf("lease %s/%s: %s\n", id.Tenant, id.Key, ev)
}

// An Observer sees every store call and every renewed, lost or expired
// lease. Here a job runs and a retry is replayed; then an operator deletes
// a key while its job runs, so the job's lease is lost and its result is
// not stored.
func ExampleObserver() {
	store, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	engine, err := idem.New(store, &idem.Options{
		Observer: printObserver{},
		Logger:   slog.New(slog.DiscardHandler), // the lost lease is logged too
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	job := func(ctx context.Context, lease *idem.Lease) ([]byte, error) { return []byte("done"), nil }

	req := idem.Request{Tenant: "acme", Key: "job-7", NoFingerprint: true}
	engine.Do(ctx, req, job)
	engine.Do(ctx, req, job) // replayed

	req.Key = "job-8"
	_, _, err = engine.Do(ctx, req, func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
		engine.ForceDelete(ctx, req.ID()) // the operator, while the job runs
		return job(ctx, lease)
	})
	fmt.Println("job-8:", err)
	// Output:
	// store acquire: err=<nil>
	// store complete: err=<nil>
	// store acquire: err=<nil>
	// store acquire: err=<nil>
	// store delete: err=<nil>
	// store complete: err=idem: lease lost
	// lease acme/job-8: lost
	// job-8: complete: idem: lease lost
}
