package redisstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// The test server has no replicas, so asking for one acknowledgement must
// fail closed: no lease handed out, the record released, and the engine
// reporting ErrStore (a retryable 503) without running the work.
func TestReplicaAckFailsClosedWithoutReplicas(t *testing.T) {
	client := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	s, err := redisstore.New(client, &redisstore.Options{Prefix: prefix, ReplicaAcks: 1, ReplicaAckTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The same keys without ReplicaAcks: what is on the server, read
	// where the store with ReplicaAcks would refuse to read.
	plain, err := redisstore.New(client, &redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := store.ID{Tenant: "t", Key: rand.Text()}
	_, err = s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o1", Fingerprint: "fp", LeaseDuration: time.Minute})
	if !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("Acquire with ReplicaAcks 1 and no replica = %v; want ErrNotReplicated", err)
	}
	if _, err := plain.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after a fail-closed acquire = %v; want ErrNotFound (record released)", err)
	}

	// The engine retries an acquire whose reply was lost as the same
	// owner, and takes a PROCESSING record with its owner token as its
	// lease: that record must pass the same replication check.
	own := store.AcquireParams{ID: store.ID{Tenant: "t", Key: rand.Text()}, Owner: "o2", Fingerprint: "fp", LeaseDuration: time.Minute}
	if res, err := plain.Acquire(ctx, own); err != nil || !res.Acquired {
		t.Fatalf("Acquire without ReplicaAcks = %+v, %v", res, err)
	}
	if _, err = s.Acquire(ctx, own); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("Acquire of the owner's own unreplicated record = %v; want ErrNotReplicated", err)
	}
	if _, err := plain.Get(ctx, own.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after the owner's retry failed closed = %v; want ErrNotFound (record released)", err)
	}

	// The engine holds nothing: the release of what its failed acquire
	// may have left needs a Get, which this server (no replica) refuses,
	// and a held release would retry it past the test's end.
	e, err := idem.New(s, &idem.Options{MaxHeld: -1})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	_, _, err = e.Do(ctx, idem.Request{Tenant: "t", Key: rand.Text(), Fingerprint: "fp"}, func(context.Context, *idem.Lease) ([]byte, error) {
		ran = true
		return nil, nil
	})
	if !errors.Is(err, idem.ErrStore) || !errors.Is(err, redisstore.ErrNotReplicated) || ran {
		t.Fatalf("Do with an unreplicated acquire = %v (ran %v); want ErrStore wrapping ErrNotReplicated, not run", err, ran)
	}
}

// Every write waits for the replicas: a release, an extend or a delete
// that only the primary has can be lost in a failover (found by
// internal/check: a released key came back PROCESSING under its old owner
// after a Sentinel failover). With no replica they fail closed too, having
// run on the primary.
func TestReplicaAckEveryWrite(t *testing.T) {
	client := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	plain, err := redisstore.New(client, &redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	acked, err := redisstore.New(client, &redisstore.Options{Prefix: prefix, ReplicaAcks: 1, ReplicaAckTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	acquire := func() store.LeaseRef {
		t.Helper()
		id := store.ID{Tenant: "t", Key: rand.Text()}
		res, err := plain.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Hour})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire = %+v, %v", res, err)
		}
		return store.LeaseRef{ID: id, Owner: "o", Fence: res.Record.Fence}
	}
	ref := acquire()
	if err := acked.Extend(ctx, store.ExtendParams{LeaseRef: ref, LeaseDuration: time.Minute, Retention: time.Hour}); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("Extend = %v; want ErrNotReplicated", err)
	}
	if err := acked.Release(ctx, ref); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("Release = %v; want ErrNotReplicated", err)
	}
	ref = acquire()
	// A refusal from a node whose replicas do not answer is not the
	// store's word either: it may be a stale primary, restarted empty
	// after a failover (found by internal/check: a Complete answered "lease
	// lost" by the old primary of a Sentinel failover).
	stranger := store.LeaseRef{ID: ref.ID, Owner: "stranger", Fence: ref.Fence}
	if err := acked.Complete(ctx, store.CompleteParams{LeaseRef: stranger, Retention: time.Hour}); !errors.Is(err, redisstore.ErrNotReplicated) || errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("refused Complete = %v; want ErrNotReplicated, not ErrLeaseLost", err)
	}
	if res, err := acked.Acquire(ctx, store.AcquireParams{ID: ref.ID, Owner: "other", Fingerprint: "fp", LeaseDuration: time.Minute}); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("Acquire of a held key = %+v, %v; want ErrNotReplicated", res, err)
	}
	// A read from a node with no replica in sync is not the store's word
	// either (found by internal/check: after a Sentinel failover a Get
	// answered "not found" for a key COMPLETED and acknowledged by every
	// replica, read from the old primary restarted empty).
	if rec, err := acked.Get(ctx, ref.ID); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("Get = %+v, %v; want ErrNotReplicated", rec, err)
	}
	if existed, err := acked.Delete(ctx, store.DeleteParams{ID: ref.ID}); !existed || !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("Delete = %v, %v; want true, ErrNotReplicated", existed, err)
	}
}

// Zero acknowledgements asked means no WAIT at all: the same server works.
func TestReplicaAckZeroDoesNotWait(t *testing.T) {
	s, err := redisstore.New(testenv.Redis(t), &redisstore.Options{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Acquire(context.Background(), store.AcquireParams{ID: store.ID{Tenant: "t", Key: "k"}, Owner: "o", Fingerprint: "fp", LeaseDuration: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("Acquire = %+v, %v", res, err)
	}
}

func TestReplicaAckOptionsRejected(t *testing.T) {
	client := testenv.Redis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:6379"}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	for name, tc := range map[string]struct {
		client redis.Scripter
		opts   redisstore.Options
	}{
		"negative acks":              {client, redisstore.Options{ReplicaAcks: -1}},
		"negative timeout":           {client, redisstore.Options{ReplicaAcks: 1, ReplicaAckTimeout: -time.Second}},
		"timeout above read timeout": {client, redisstore.Options{ReplicaAcks: 1, ReplicaAckTimeout: time.Minute}},
		"ring cannot pin a node":     {ring, redisstore.Options{ReplicaAcks: 1}},
	} {
		if _, err := redisstore.New(tc.client, &tc.opts); err == nil {
			t.Errorf("%s: New accepted %+v", name, tc.opts)
		}
	}
}
