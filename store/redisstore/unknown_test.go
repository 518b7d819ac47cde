package redisstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storetest"
)

// TestRecordBeforeUnknown: a PROCESSING record written before records
// outlived their lease (no life field: it ends with its lease) is read
// and completed by its owner, and ends with its lease.
func TestRecordBeforeUnknown(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	s, err := redisstore.New(c, &redisstore.Options{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The encoding of acquire.lua before issue 12: state, lease end,
	// fence, owner, fingerprint, acquired.
	const old = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], struct.pack('>c1dI4c0I4c0I4c0d', 'P', now + tonumber(ARGV[1]), 2, '42', 5, 'owner', 2, 'fp', now), 'PX', ARGV[1])`
	write := func(id store.ID, lease time.Duration) {
		if err := c.Eval(ctx, old, []string{s.RecordKey(id)}, lease.Milliseconds()).Err(); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
	}
	id := store.ID{Tenant: "old", Key: rand.Text()}
	write(id, time.Minute)
	rec, err := s.Get(ctx, id)
	if err != nil || rec.State != store.StateProcessing || rec.Fence != 42 || rec.Owner != "owner" || rec.TTL <= 0 || rec.TTL > time.Minute {
		t.Fatalf("Get of an old record = %+v, %v; want PROCESSING, fence 42, the lease left", rec, err)
	}
	ref := store.LeaseRef{ID: id, Owner: "owner", Fence: 42}
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 200}, Retention: time.Minute}); err != nil {
		t.Fatalf("Complete of an old record: %v", err)
	}

	// An old record ends with its lease: the next acquisition finds the
	// key absent, not abandoned.
	ended := store.ID{Tenant: "old", Key: rand.Text()}
	write(ended, 20*time.Millisecond)
	storetest.Sleep(40 * time.Millisecond) // Redis keeps real time
	res, err := s.Acquire(ctx, store.AcquireParams{ID: ended, Owner: "new", LeaseDuration: time.Minute, Retention: time.Minute})
	if err != nil || !res.Acquired || res.Takeover != nil {
		t.Fatalf("Acquire after an old record's lease = %+v, %v; want acquired", res, err)
	}
}

// TestListUnknownBadInput: a cursor the store did not make, one of
// another tenant, and a negative limit are errors; a Ring cannot list.
func TestListUnknownBadInput(t *testing.T) {
	ctx := context.Background()
	s, err := redisstore.New(testenv.Redis(t), &redisstore.Options{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []store.ListParams{
		{Tenant: "a", After: "garbage"},
		{Tenant: "a", After: "1:1:a:k"}, // index 1 of a store with one index
		{Tenant: "a", After: "0:1:b:k"}, // another tenant's member
		{Tenant: "a", Limit: -1},
	} {
		if page, err := s.ListUnknown(ctx, p); err == nil {
			t.Errorf("ListUnknown(%+v) = %+v; want an error", p, page)
		}
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": "127.0.0.1:6379"}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	rs, err := redisstore.New(ring, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.ListUnknown(ctx, store.ListParams{AllTenants: true}); err == nil {
		t.Error("ListUnknown on a Ring succeeded; its index is spread over the shards")
	}
}
