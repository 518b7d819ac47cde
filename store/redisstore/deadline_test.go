package redisstore_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// TestDeadlineOnStalledServer: with the server SIGSTOPped, every store
// call returns at its context's deadline, on the client ParseURL builds
// and on rueidis: a renewal that hangs cannot hold a lease past its local
// end (issue 12, point 5). Without ContextTimeoutEnabled, go-redis would
// wait for its read timeout (3 s).
func TestDeadlineOnStalledServer(t *testing.T) {
	needTopology(t)
	ctx := context.Background()
	srv, err := redisproc.Start(ctx, redisproc.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)

	gr, err := redisstore.ParseURL("redis://" + srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gr.Close() })
	rd, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rd.Close)
	goredisStore, err := redisstore.New(gr, nil)
	if err != nil {
		t.Fatal(err)
	}
	rueidisStore, err := redisstore.NewRueidis(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	stores := map[string]store.Store{"go-redis (ParseURL)": goredisStore, "rueidis": rueidisStore}

	// Each store holds a lease, on a connection that is open and has the
	// scripts loaded, before the server stops.
	refs := map[string]store.LeaseRef{}
	for name, s := range stores {
		id := store.ID{Tenant: "deadline", Key: rand.Text()}
		res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: name, LeaseDuration: time.Minute, Retention: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("%s: Acquire = %+v, %v", name, res, err)
		}
		refs[name] = store.LeaseRef{ID: id, Owner: name, Fence: res.Record.Fence}
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })

	const wait, slack = 300 * time.Millisecond, 100 * time.Millisecond
	for name, s := range stores {
		ref := refs[name]
		calls := map[string]func(context.Context) error{
			"Extend": func(ctx context.Context) error {
				return s.Extend(ctx, store.ExtendParams{LeaseRef: ref, LeaseDuration: time.Minute, Retention: time.Minute})
			},
			"MarkUnknown": func(ctx context.Context) error {
				return s.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: ref, Reason: "stalled", Retention: time.Minute})
			},
			"Get": func(ctx context.Context) error { _, err := s.Get(ctx, ref.ID); return err },
			"ListUnknown": func(ctx context.Context) error {
				_, err := s.ListUnknown(ctx, store.ListParams{Tenant: "deadline"})
				return err
			},
		}
		for op, call := range calls {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			deadline, _ := ctx.Deadline()
			err := call(ctx)
			late := time.Since(deadline)
			cancel()
			if err == nil {
				t.Errorf("%s: %s on a stopped server succeeded", name, op)
			}
			if late > slack {
				t.Errorf("%s: %s returned %v after its context's deadline (%v); want within %v", name, op, late, err, slack)
			}
		}
	}
}
