package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newStore(t *testing.T, maxBytes int64) (*memstore.Store, *fakeClock) {
	return newStoreShare(t, maxBytes, 0)
}

// newStoreShare is newStore with Options.TenantShare: 1 for the tests of
// the store's bound, whose keys are all one tenant's.
func newStoreShare(t *testing.T, maxBytes int64, share float64) (*memstore.Store, *fakeClock) {
	clock := &fakeClock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	s, err := memstore.New(&memstore.Options{Clock: clock.Now, MaxBytes: maxBytes, TenantShare: share})
	if err != nil {
		t.Fatal(err)
	}
	return s, clock
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) (store.Store, func(time.Duration)) {
			s, clock := newStore(t, 0) // a clock of its own: it ages this store only
			return s, clock.Advance
		},
	})
}

func TestFullStoreRefusesNewKeysKeepsEveryLiveRecord(t *testing.T) {
	ctx := context.Background()
	s, clock := newStoreShare(t, 4096, 1)
	acquire := func(key string) (store.AcquireResult, error) {
		return s.Acquire(ctx, store.AcquireParams{ID: store.ID{Key: key}, Owner: "owner-" + key, LeaseDuration: time.Minute, Retention: time.Hour})
	}
	ref := func(res store.AcquireResult) store.LeaseRef {
		return store.LeaseRef{ID: res.Record.ID, Owner: res.Record.Owner, Fence: res.Record.Fence}
	}
	complete := func(res store.AcquireResult, body int, retention time.Duration) {
		t.Helper()
		err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref(res), Result: store.Result{Status: 201, Body: make([]byte, body)}, Retention: retention})
		if err != nil {
			t.Fatalf("Complete %v: %v", res.Record.ID, err)
		}
	}
	// A result whose retention ends makes room: expired records go first.
	res, err := acquire("short-lived")
	if err != nil {
		t.Fatal(err)
	}
	complete(res, 3000, time.Second)
	clock.Advance(2 * time.Second)

	// Two results within their retention, then leases until the store is full.
	for _, key := range []string{"done-1", "done-2"} {
		res, err := acquire(key)
		if err != nil {
			t.Fatalf("Acquire %s with an expired record taking the room: %v", key, err)
		}
		complete(res, 1200, time.Hour)
	}
	var held []store.AcquireResult
	for i := 0; ; i++ {
		res, err := acquire("running-" + string(rune('a'+i)))
		if errors.Is(err, store.ErrStoreFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, res)
		if i > 100 {
			t.Fatal("a 4 KiB store never filled up")
		}
	}
	if len(held) < 2 {
		t.Fatalf("only %d leases fit; the test needs two", len(held))
	}
	// Full: every stored result still replays, every lease is still held.
	for _, key := range []string{"done-1", "done-2"} {
		res, err := acquire(key)
		if err != nil || res.Acquired || res.Record.State != store.StateCompleted || len(res.Record.Result.Body) != 1200 {
			t.Fatalf("replay of %s from a full store: acquired=%v state=%v err=%v", key, res.Acquired, res.Record.State, err)
		}
	}
	for _, h := range held {
		if res, err := acquire(h.Record.Key); err != nil || res.Acquired || res.Record.State != store.StateProcessing {
			t.Fatalf("held lease %s from a full store: acquired=%v err=%v", h.Record.Key, res.Acquired, err)
		}
	}
	// An admitted key completes even past the bound: its work has run.
	complete(held[0], 8192, time.Hour)
	rec, err := s.Get(ctx, held[0].Record.ID)
	if err != nil || rec.State != store.StateCompleted || len(rec.Result.Body) != 8192 {
		t.Fatalf("result stored past the bound: state=%v err=%v", rec.State, err)
	}
	if _, err := acquire("new-while-over"); !errors.Is(err, store.ErrStoreFull) {
		t.Fatalf("Acquire of a new key over the bound = %v; want ErrStoreFull", err)
	}
	// Releasing a lease frees its room but not enough while over the bound.
	if err := s.Release(ctx, ref(held[1])); err != nil {
		t.Fatal(err)
	}
	if _, err := acquire("new-still-over"); !errors.Is(err, store.ErrStoreFull) {
		t.Fatalf("Acquire while still over the bound = %v; want ErrStoreFull", err)
	}
	// Once retention ends, the room comes back.
	clock.Advance(time.Hour)
	if res, err := acquire("after-retention"); err != nil || !res.Acquired {
		t.Fatalf("Acquire after every record expired: acquired=%v err=%v", res.Acquired, err)
	}
}

func TestNewRejectsBadBounds(t *testing.T) {
	if _, err := memstore.New(&memstore.Options{MaxBytes: -1}); err == nil {
		t.Fatal("New accepted a negative MaxBytes")
	}
	for _, share := range []float64{-0.5, 1.5, math.NaN(), math.Inf(1)} {
		if _, err := memstore.New(&memstore.Options{TenantShare: share}); err == nil {
			t.Errorf("New accepted TenantShare %v", share)
		}
	}
}

// TestFullStoreKeepsUnknownOutcomes: a lease that ended is no free room:
// its work may have run, so the record is kept (abandoned, then UNKNOWN)
// until settled, however long, and a full store refuses new keys rather
// than drop it. Taking over an ended lease replaces the record, so a full
// store allows it; settling a key makes room.
func TestFullStoreKeepsUnknownOutcomes(t *testing.T) {
	ctx := context.Background()
	s, clock := newStoreShare(t, 4096, 1)
	acquire := func(key string, takeOver bool) (store.AcquireResult, error) {
		return s.Acquire(ctx, store.AcquireParams{ID: store.ID{Key: key}, Owner: "owner-" + key, LeaseDuration: time.Second, Retention: time.Hour, TakeOver: takeOver})
	}
	var held []string
	for i := 0; ; i++ {
		key := "k" + string(rune('a'+i))
		_, err := acquire(key, false)
		if errors.Is(err, store.ErrStoreFull) {
			break
		}
		if err != nil || i > 100 {
			t.Fatalf("filling a 4 KiB store: %v after %d keys", err, i)
		}
		held = append(held, key)
	}
	clock.Advance(2 * time.Second) // every lease ended
	if _, err := acquire("new", false); !errors.Is(err, store.ErrStoreFull) {
		t.Fatalf("Acquire of a new key in a store full of ended leases = %v; want ErrStoreFull", err)
	}
	res0, err := acquire(held[0], false)
	if err != nil || res0.Acquired || res0.Record.State != store.StateUnknown {
		t.Fatalf("Acquire of an ended lease = %+v, %v; want it turned UNKNOWN", res0, err)
	}
	res, err := acquire(held[1], true)
	if err != nil || !res.Acquired || res.Takeover == nil {
		t.Fatalf("takeover in a full store = %+v, %v; want acquired with the previous attempt reported", res, err)
	}
	for _, key := range held[2:] {
		if rec, err := s.Get(ctx, store.ID{Key: key}); err != nil || rec.State != store.StateUnknown {
			t.Fatalf("ended lease %s in a full store = %+v, %v; want kept, reported UNKNOWN", key, rec, err)
		}
	}
	// Time settles nothing: far past every retention the store is still
	// full of them (fail closed, and idem_unknown_keys says why).
	clock.Advance(24 * time.Hour)
	if _, err := acquire("new", false); !errors.Is(err, store.ErrStoreFull) {
		t.Fatalf("Acquire of a new key a day later = %v; want ErrStoreFull: the unsettled keys are kept", err)
	}
	// Settling makes room: a resolution (not executed) and a delete.
	if err := s.Resolve(ctx, store.ResolveParams{ID: store.ID{Key: held[0]}, Fence: res0.Record.Fence}); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if ok, err := s.Delete(ctx, store.DeleteParams{ID: store.ID{Key: held[2]}}); err != nil || !ok {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	if res, err := acquire("new", false); err != nil || !res.Acquired {
		t.Fatalf("Acquire after two keys were settled = %+v, %v; want acquired", res, err)
	}
}

func TestListUnknownRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, 0)
	for _, id := range []store.ID{{Tenant: "a", Key: "1"}, {Tenant: "a", Key: "2"}, {Tenant: "b", Key: "1"}} {
		res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", LeaseDuration: time.Minute, Retention: time.Hour})
		if err == nil {
			err = s.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: store.LeaseRef{ID: id, Owner: "o", Fence: res.Record.Fence}, Reason: "test", Retention: time.Hour})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	page, err := s.ListUnknown(ctx, store.ListParams{Tenant: "a", Limit: 1})
	if err != nil || len(page.Records) != 1 || page.Next == "" {
		t.Fatalf("first page = %+v, %v; want one record and a next page", page, err)
	}
	for name, p := range map[string]store.ListParams{
		"negative limit":           {Tenant: "a", Limit: -1},
		"garbage cursor":           {Tenant: "a", After: "garbage"},
		"cursor past its length":   {Tenant: "a", After: "9:a"},
		"another tenant's cursor":  {Tenant: "b", After: page.Next},
		"negative length cursor":   {Tenant: "a", After: "-1:a"},
		"cursor of all, no length": {AllTenants: true, After: ":"},
	} {
		if page, err := s.ListUnknown(ctx, p); err == nil {
			t.Errorf("ListUnknown(%s) = %+v; want an error", name, page)
		}
	}
	all, err := s.ListUnknown(ctx, store.ListParams{AllTenants: true, After: page.Next})
	if err != nil || len(all.Records) != 2 || all.Records[0].ID != (store.ID{Tenant: "a", Key: "2"}) || all.Next != "" {
		t.Fatalf("all tenants after a tenant's cursor = %+v, %v; want a/2 and b/1, last page", all, err)
	}
}

// Usage counts what the bound counts: it grows with a stored result, and
// falls back when the record's retention ends.
func TestUsageFollowsTheRecords(t *testing.T) {
	ctx := context.Background()
	s, clock := newStore(t, 1<<20)
	if used, limit := s.Usage(); used != 0 || limit != 1<<20 {
		t.Fatalf("empty store: Usage = %d, %d; want 0, %d", used, limit, 1<<20)
	}
	res, err := s.Acquire(ctx, store.AcquireParams{ID: store.ID{Key: "k"}, Owner: "o", LeaseDuration: time.Minute, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	leased, _ := s.Usage()
	if leased <= 0 {
		t.Fatalf("Usage with a lease = %d; want more than 0", leased)
	}
	ref := store.LeaseRef{ID: res.Record.ID, Owner: "o", Fence: res.Record.Fence}
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 201, Body: make([]byte, 5000)}, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if used, _ := s.Usage(); used < leased+5000 {
		t.Fatalf("Usage with a 5000-byte result = %d; want at least %d", used, leased+5000)
	}
	clock.Advance(2 * time.Hour)
	if used, _ := s.Usage(); used != 0 {
		t.Fatalf("Usage after the retention ended = %d; want 0", used)
	}
}

// TestTenantShare is issue 22's item 10: one tenant's 300 KiB result in a
// 256 KiB store made every tenant's new keys 503 for the retention. A
// tenant may hold a share of the bound (a quarter by default): past it,
// its own new keys are refused while the other tenants keep acquiring and
// completing, and every result stored stays until its retention ends.
func TestTenantShare(t *testing.T) {
	ctx := context.Background()
	s, clock := newStore(t, 256<<10)
	acquire := func(tenant, key string) (store.AcquireResult, error) {
		return s.Acquire(ctx, store.AcquireParams{ID: store.ID{Tenant: tenant, Key: key}, Owner: "owner-" + key, LeaseDuration: time.Minute, Retention: time.Hour})
	}
	run := func(tenant, key string, body int) {
		t.Helper()
		res, err := acquire(tenant, key)
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire %s/%s = %+v, %v; want acquired", tenant, key, res, err)
		}
		ref := store.LeaseRef{ID: res.Record.ID, Owner: res.Record.Owner, Fence: res.Record.Fence}
		if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 201, Body: make([]byte, body)}, Retention: time.Hour}); err != nil {
			t.Fatalf("Complete %s/%s: %v", tenant, key, err)
		}
	}
	// The case: one result larger than the whole store.
	run("mallory", "huge", 300<<10)
	if _, err := acquire("mallory", "next"); !errors.Is(err, store.ErrStoreFull) {
		t.Fatalf("Acquire of the tenant over its share = %v; want ErrStoreFull", err)
	}
	run("alice", "a-1", 1<<10)
	// A tenant fills its share with many small results; the others go on.
	n := 0
	for ; ; n++ {
		if n > 1000 {
			t.Fatal("a tenant stored 1,000 results of 4 KiB in a 256 KiB store")
		}
		res, err := acquire("bob", fmt.Sprint("b-", n))
		if errors.Is(err, store.ErrStoreFull) {
			break
		}
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire bob/b-%d = %+v, %v", n, res, err)
		}
		if err := s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: res.Record.ID, Owner: res.Record.Owner, Fence: res.Record.Fence},
			Result: store.Result{Status: 201, Body: make([]byte, 4<<10)}, Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if share := int64(n) * (4<<10 + 256); share > 64<<10+4<<10+256 || n < 10 {
		t.Fatalf("bob stored %d results of 4 KiB (%d bytes) before his share was full; want about a quarter of 256 KiB", n, share)
	}
	run("alice", "a-2", 1<<10)
	run("carol", "c-1", 1<<10)
	// Every stored result still replays, the huge one included.
	for _, id := range []store.ID{{Tenant: "mallory", Key: "huge"}, {Tenant: "bob", Key: "b-0"}, {Tenant: "alice", Key: "a-1"}} {
		if rec, err := s.Get(ctx, id); err != nil || rec.State != store.StateCompleted {
			t.Fatalf("Get %v = %+v, %v; want its stored result", id, rec, err)
		}
	}
	clock.Advance(2 * time.Hour)
	run("mallory", "after-retention", 1<<10)
}

// TestFrozenRecordLivesItsOwnLife: a COMPLETED record deleted and made
// again leaves the end of the first behind in the store's order of
// expiry; that end must not drop the second record, which lives its own
// retention, and the second's end drops it.
func TestFrozenRecordLivesItsOwnLife(t *testing.T) {
	ctx := context.Background()
	s, clock := newStore(t, 0)
	id := store.ID{Tenant: "t", Key: "k"}
	cycle := func(retention time.Duration) {
		t.Helper()
		res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", Fingerprint: "fp", LeaseDuration: time.Minute, Retention: retention})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire = %+v, %v", res, err)
		}
		if err := s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: id, Owner: "o", Fence: res.Record.Fence},
			Result: store.Result{Status: 201}, Retention: retention}); err != nil {
			t.Fatal(err)
		}
	}
	cycle(time.Hour)
	if ok, err := s.Delete(ctx, store.DeleteParams{ID: id}); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	cycle(2 * time.Hour)
	clock.Advance(time.Hour + time.Minute) // past the first record's end
	if rec, err := s.Get(ctx, id); err != nil || rec.State != store.StateCompleted {
		t.Fatalf("Get after the first record's end = %+v, %v; want the second, COMPLETED", rec, err)
	}
	clock.Advance(time.Hour)
	if _, err := s.Get(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after the second record's end: %v; want ErrNotFound", err)
	}
	if used, _ := s.Usage(); used != 0 {
		t.Errorf("Usage = %d with no record; want 0", used)
	}
}

// TestFrozenResultAsStored: a stored result is read back as it was
// given: several values of a header, a nil body and header apart from
// empty ones.
func TestFrozenResultAsStored(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, 0)
	for i, want := range []store.Result{
		{Status: 201, Header: http.Header{"Set-Cookie": {"a=1", "b=2"}, "Content-Type": {"application/json"}}, Body: []byte(`{}`)},
		{Status: 204},
		{Status: 200, Header: http.Header{}, Body: []byte{}},
	} {
		id := store.ID{Tenant: "t", Key: strconv.Itoa(i)}
		res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: id, Owner: "o", Fence: res.Record.Fence},
			Result: want, Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
		rec, err := s.Get(ctx, id)
		if err != nil || rec.Result == nil || !reflect.DeepEqual(*rec.Result, want) || rec.Owner != "o" || rec.Fingerprint != "fp" {
			t.Errorf("result %d: Get = %+v (result %+v), %v; want %+v", i, rec, rec.Result, err, want)
		}
	}
}

// An UNKNOWN record reports the retentions its attempt asked for (the
// longer of each, through MarkUnknown), so that a resolution keeps its
// result at least that long: its TTL is 0 (kept until settled).
func TestUnknownKeepsItsAttemptsRetentions(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, 0)
	id := store.ID{Tenant: "t", Key: "k"}
	res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o", Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Hour, KeyRetention: 2 * time.Hour})
	if err != nil || !res.Acquired || res.Record.Retention != time.Hour || res.Record.KeyRetention != 2*time.Hour {
		t.Fatalf("Acquire = %+v, %v; want acquired with the retentions 1h and 2h", res, err)
	}
	ref := store.LeaseRef{ID: id, Owner: "o", Fence: res.Record.Fence}
	if err := s.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: ref, Reason: "timeout", Retention: 3 * time.Hour, KeyRetention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, id); err != nil || rec.State != store.StateUnknown || rec.TTL != 0 || rec.Retention != 3*time.Hour || rec.KeyRetention != 2*time.Hour {
		t.Fatalf("Get = %+v, %v; want UNKNOWN, TTL 0, retentions 3h and 2h (the longer of each)", rec, err)
	}
}
