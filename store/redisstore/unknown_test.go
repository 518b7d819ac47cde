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

// TestRecordBeforeLabel: records written before they carried a label
// (issue 36) are read, replayed, marked, resolved and listed, with no
// label; and a record that passes through a change keeps none.
func TestRecordBeforeLabel(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	s, err := redisstore.New(c, &redisstore.Options{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The encodings of record.lua before issue 36: P with its life, C and
	// U, none followed by a label.
	const old = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local life = now + 60000
local rec
if ARGV[1] == 'P' then
  rec = struct.pack('>c1dI4c0I4c0I4c0dd', 'P', life, 2, '42', 5, 'owner', 2, 'fp', now, life)
elseif ARGV[1] == 'C' then
  rec = struct.pack('>c1dI4c0I4c0I4c0dddI4c0I4c0', 'C', life, 2, '42', 5, 'owner', 2, 'fp', now, now, 201, 0, '', 4, 'body')
else
  rec = struct.pack('>c1dI4c0I4c0I4c0ddI4c0I4c0d', 'U', life, 2, '42', 5, 'owner', 2, 'fp', now, now, 7, 'timeout', 0, '', 0)
end
redis.call('SET', KEYS[1], rec, 'PX', 60000)
redis.call('ZADD', KEYS[2], 0, string.match(KEYS[1], '{(.*)}$'))`
	tenant := "old-" + rand.Text()[:8]
	write := func(state string) store.ID {
		id := store.ID{Tenant: tenant, Key: state}
		if err := c.Eval(ctx, old, []string{s.RecordKey(id), s.IndexKeyOf(id)}, state).Err(); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return id
	}
	processing, completed, unknown := write("P"), write("C"), write("U")
	ref := store.LeaseRef{ID: processing, Owner: "owner", Fence: 42}
	for id, want := range map[store.ID]store.State{processing: store.StateProcessing, completed: store.StateCompleted, unknown: store.StateUnknown} {
		rec, err := s.Get(ctx, id)
		if err != nil || rec.State != want || rec.Fence != 42 || rec.Label != "" {
			t.Fatalf("Get of an old %v record = %+v, %v; want it, fence 42, no label", want, rec, err)
		}
	}
	res, err := s.Acquire(ctx, store.AcquireParams{ID: completed, Owner: "new", Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Minute, Label: "POST /x"})
	if err != nil || res.Acquired || res.Record.State != store.StateCompleted || string(res.Record.Result.Body) != "body" || res.Record.Label != "" {
		t.Fatalf("Acquire of an old COMPLETED record = %+v, %v; want its replay, no label", res, err)
	}
	page, err := s.ListUnknown(ctx, store.ListParams{Tenant: tenant})
	if err != nil || len(page.Records) != 1 || page.Records[0].Reason != "timeout" || page.Records[0].Label != "" {
		t.Fatalf("ListUnknown of an old UNKNOWN record = %+v, %v; want it, reason timeout", page, err)
	}
	if err := s.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: ref, Reason: "cut", Retention: time.Minute}); err != nil {
		t.Fatalf("MarkUnknown of an old PROCESSING record: %v", err)
	}
	if err := s.Resolve(ctx, store.ResolveParams{ID: processing, Fence: 42, Result: &store.Result{Status: 200}, Retention: time.Minute}); err != nil {
		t.Fatalf("Resolve of it: %v", err)
	}
	if rec, err := s.Get(ctx, processing); err != nil || rec.State != store.StateCompleted || rec.Label != "" {
		t.Fatalf("Get after MarkUnknown and Resolve of an old record = %+v, %v; want COMPLETED, no label", rec, err)
	}
}
