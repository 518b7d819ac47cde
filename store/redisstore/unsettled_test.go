package redisstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storetest"
)

// unsettledStores returns a store on each path a script can take: EVALSHA
// through go-redis, through rueidis, FCALL, and batched (Coalesce).
func unsettledStores(t *testing.T) map[string]*redisstore.Store {
	goredis, plain := testenv.Redis(t), rueidisClient(t)
	stores := map[string]*redisstore.Store{}
	for name, newStore := range map[string]func(prefix string) (*redisstore.Store, error){
		"go-redis": func(p string) (*redisstore.Store, error) {
			return redisstore.New(goredis, &redisstore.Options{Prefix: p})
		},
		"rueidis": func(p string) (*redisstore.Store, error) {
			return redisstore.NewRueidis(plain, &redisstore.Options{Prefix: p})
		},
		"functions": func(p string) (*redisstore.Store, error) {
			return redisstore.NewRueidis(plain, &redisstore.Options{Prefix: p, Functions: true})
		},
		"coalesce": func(p string) (*redisstore.Store, error) {
			return redisstore.New(goredis, &redisstore.Options{Prefix: p, Coalesce: true})
		},
	} {
		s, err := newStore(testenv.Prefix(t) + name + ":")
		if err != nil {
			t.Fatal(err)
		}
		stores[name] = s
	}
	return stores
}

// wantNoTTL fails t unless the record key of id exists with no Redis TTL.
func wantNoTTL(t *testing.T, c *redis.Client, s *redisstore.Store, id store.ID, what string) {
	t.Helper()
	if d, err := c.PTTL(context.Background(), s.RecordKey(id)).Result(); err != nil || d != -1 {
		t.Fatalf("PTTL of the record %s = %v, %v; want -1 (no expiry)", what, d, err)
	}
}

// wantTTL fails t unless the record key of id has a Redis TTL.
func wantTTL(t *testing.T, c *redis.Client, s *redisstore.Store, id store.ID, what string) {
	t.Helper()
	if d, err := c.PTTL(context.Background(), s.RecordKey(id)).Result(); err != nil || d <= 0 {
		t.Fatalf("PTTL of the record %s = %v, %v; want a TTL", what, d, err)
	}
}

// TestUnsettledHasNoTTL: a PROCESSING record (its lease running, renewed
// or ended) and an UNKNOWN one (marked, or abandoned) have no Redis TTL
// and outlive the longer of their retention and key retention: the next
// acquisition finds them UNKNOWN and runs nothing, and the owner's late
// Complete lands. Settling gives the key its TTL back. Before, the key
// had PX lease+retention+1h and the record ended with its retention.
func TestUnsettledHasNoTTL(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	const short = 50 * time.Millisecond
	for name, s := range unsettledStores(t) {
		t.Run(name, func(t *testing.T) {
			acquire := func(id store.ID, owner, fp string, lease time.Duration) store.AcquireResult {
				t.Helper()
				res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: owner, Fingerprint: fp, LeaseDuration: lease,
					Retention: short, KeyRetention: short, TakeOver: true})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			marked := store.ID{Tenant: "unsettled", Key: rand.Text()}
			abandoned := store.ID{Tenant: "unsettled", Key: rand.Text()}
			refs := map[store.ID]store.LeaseRef{}
			for _, id := range []store.ID{marked, abandoned} {
				lease := time.Hour
				if id == abandoned {
					lease = short
				}
				res := acquire(id, "owner", "fp", lease)
				if !res.Acquired {
					t.Fatalf("Acquire = %+v; want acquired", res)
				}
				refs[id] = store.LeaseRef{ID: id, Owner: "owner", Fence: res.Record.Fence}
				wantNoTTL(t, c, s, id, "acquired")
			}
			if err := s.Extend(ctx, store.ExtendParams{LeaseRef: refs[marked], LeaseDuration: time.Hour, Retention: short}); err != nil {
				t.Fatal(err)
			}
			wantNoTTL(t, c, s, marked, "extended")
			if err := s.MarkUnknown(ctx, store.MarkUnknownParams{LeaseRef: refs[marked], Reason: "timeout", Retention: short, KeyRetention: short}); err != nil {
				t.Fatal(err)
			}
			wantNoTTL(t, c, s, marked, "marked UNKNOWN")

			storetest.Sleep(6 * short) // past every lease, retention and key retention: Redis keeps real time
			for id, reason := range map[store.ID]string{marked: "timeout", abandoned: store.ReasonAbandoned} {
				rec, err := s.Get(ctx, id)
				if err != nil || rec.State != store.StateUnknown || rec.Reason != reason || rec.Fence != refs[id].Fence {
					t.Fatalf("Get past the retention = %+v, %v; want UNKNOWN %q, fence %d", rec, err, reason, refs[id].Fence)
				}
				// Another request, and the same one with TakeOver: neither runs it.
				for _, fp := range []string{"other", "fp"} {
					if res := acquire(id, rand.Text(), fp, time.Hour); res.Acquired || res.Record.State != store.StateUnknown || res.Record.Fence != refs[id].Fence {
						t.Fatalf("Acquire (fingerprint %s) past the retention = %+v; want the UNKNOWN record", fp, res)
					}
				}
				wantNoTTL(t, c, s, id, "UNKNOWN past its retention")
				if page, err := s.ListUnknown(ctx, store.ListParams{Tenant: id.Tenant, Limit: 1000}); err != nil || !listed(page, id) {
					t.Fatalf("ListUnknown = %+v, %v; want %v listed", page, err, id)
				}
			}

			// The owner's late word lands, and settling gives the key a TTL.
			if err := s.Complete(ctx, store.CompleteParams{LeaseRef: refs[marked], Result: store.Result{Status: 201}, Retention: time.Minute}); err != nil {
				t.Fatalf("late Complete of the UNKNOWN record: %v", err)
			}
			if rec, err := s.Get(ctx, marked); err != nil || rec.State != store.StateCompleted || rec.Result.Status != 201 {
				t.Fatalf("Get after the late Complete = %+v, %v; want COMPLETED 201", rec, err)
			}
			wantTTL(t, c, s, marked, "completed")
			if err := s.Release(ctx, refs[abandoned]); err != nil {
				t.Fatalf("late Release of the abandoned record: %v", err)
			}
			wantTTL(t, c, s, abandoned, "released (its fence's tombstone)")
		})
	}
}

// TestLateCompleteOfEndedLease: the owner of a lease that ended long
// before its retention (nobody acquired since: the record is PROCESSING
// in Redis) completes it, through complete.lua's fast path. Before, that
// path refused once the record's life had passed.
func TestLateCompleteOfEndedLease(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	for name, s := range unsettledStores(t) {
		t.Run(name, func(t *testing.T) {
			id := store.ID{Tenant: "late", Key: rand.Text()}
			res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "owner", Fingerprint: "fp", LeaseDuration: 20 * time.Millisecond,
				Retention: 20 * time.Millisecond})
			if err != nil || !res.Acquired {
				t.Fatalf("Acquire = %+v, %v", res, err)
			}
			storetest.Sleep(100 * time.Millisecond) // Redis keeps real time
			wantNoTTL(t, c, s, id, "of the ended lease")
			ref := store.LeaseRef{ID: id, Owner: "owner", Fence: res.Record.Fence}
			if err := s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 200}, Retention: time.Minute}); err != nil {
				t.Fatalf("late Complete of the ended lease: %v", err)
			}
			if rec, err := s.Get(ctx, id); err != nil || rec.State != store.StateCompleted {
				t.Fatalf("Get after the late Complete = %+v, %v; want COMPLETED", rec, err)
			}
		})
	}
}

// TestOldUnsettledRecordLosesItsTTL: records written before unsettled
// records lost their TTL (a finite life, PX lease+retention+1h) are read
// as never ending, and the scripts that find them in the way (acquire,
// mark unknown, list) remove their TTL.
func TestOldUnsettledRecordLosesItsTTL(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	s, err := redisstore.New(c, &redisstore.Options{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	// An old acquire.lua's record: PROCESSING, lease end, fence, owner,
	// fingerprint, acquired, life end, label, with the old PX; its lease
	// and its life both end ARGV[1] ms ago.
	const old = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ago = now - tonumber(ARGV[1])
redis.call('SET', KEYS[1], struct.pack('>c1dI4c0I4c0I4c0ddI4c0', 'P', ago, 2, '42', 5, 'owner', 2, 'fp', ago - 1000, ago, 0, ''), 'PX', ARGV[2])`
	write := func(id store.ID, ago time.Duration) {
		t.Helper()
		if err := c.Eval(ctx, old, []string{s.RecordKey(id)}, ago.Milliseconds(), time.Hour.Milliseconds()).Err(); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
	}
	id := store.ID{Tenant: "old", Key: rand.Text()}
	write(id, time.Minute)
	wantTTL(t, c, s, id, "written by the old code")
	res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "new", Fingerprint: "other", LeaseDuration: time.Minute, Retention: time.Minute})
	if err != nil || res.Acquired || res.Record.State != store.StateUnknown || res.Record.Fence != 42 {
		t.Fatalf("Acquire of an old record past its life = %+v, %v; want UNKNOWN, fence 42 (not forgotten)", res, err)
	}
	wantNoTTL(t, c, s, id, "turned UNKNOWN")
	if err := s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: id, Owner: "owner", Fence: 42}, Result: store.Result{Status: 200}, Retention: time.Minute}); err != nil {
		t.Fatalf("late Complete of an old record: %v", err)
	}

	// Found in the way by an acquisition while its lease runs, and by a
	// list once it ended (listed, not changed).
	for _, how := range []string{"acquire", "list"} {
		id := store.ID{Tenant: "old-" + how, Key: rand.Text()}
		switch how {
		case "acquire":
			write(id, -time.Minute) // its lease runs

			if res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "new", Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Minute}); err != nil || res.Acquired {
				t.Fatalf("Acquire = %+v, %v; want not acquired", res, err)
			}
		case "list":
			write(id, time.Minute)
			// The old code indexed the record too.
			if err := c.ZAdd(ctx, s.IndexKeyOf(id), redis.Z{Member: fmt.Sprintf("%d:%s:%s", len(id.Tenant), id.Tenant, id.Key)}).Err(); err != nil {
				t.Fatal(err)
			}
			if page, err := s.ListUnknown(ctx, store.ListParams{Tenant: id.Tenant}); err != nil || !listed(page, id) {
				t.Fatalf("ListUnknown = %+v, %v; want the old record listed", page, err)
			}
		}
		wantNoTTL(t, c, s, id, "written by the old code, after "+how)
	}
}

func listed(page store.ListPage, id store.ID) bool {
	for _, r := range page.Records {
		if r.ID == id {
			return true
		}
	}
	return false
}

// TestAbandonedKeepsItsAttemptsRetention: an abandoned record turned
// UNKNOWN late, by a claim or by another request's acquire, still reports
// the retention its attempt asked for (Record.Retention), which a
// reconciliation keeps the result for. It used to lose the time between
// its lease's end and the claim: a reconciler that came back late
// resolved the key with the engine's shorter retention.
func TestAbandonedKeepsItsAttemptsRetention(t *testing.T) {
	ctx := context.Background()
	const retention = 10 * time.Second
	for name, s := range unsettledStores(t) {
		t.Run(name, func(t *testing.T) {
			for _, via := range []string{"claim", "acquire"} {
				id := store.ID{Tenant: "t", Key: via + "-" + rand.Text()}
				if _, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o1", Fingerprint: "fp", LeaseDuration: 50 * time.Millisecond,
					Retention: retention, KeyRetention: retention}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(300 * time.Millisecond) // past the lease's end, on the server's clock: a lower bound
				var rec store.Record
				switch via {
				case "claim":
					res, err := s.Claim(ctx, store.ClaimParams{ID: id, Owner: "reconciler", LeaseDuration: time.Minute})
					if err != nil || !res.Claimed {
						t.Fatalf("claim: %+v, %v", res, err)
					}
					rec = res.Record
				case "acquire": // another request's, with a short retention of its own
					res, err := s.Acquire(ctx, store.AcquireParams{ID: id, Owner: "o2", Fingerprint: "other", LeaseDuration: time.Minute,
						Retention: time.Second, KeyRetention: time.Second})
					if err != nil || res.Acquired {
						t.Fatalf("acquire of the abandoned key: %+v, %v", res, err)
					}
					rec = res.Record
				}
				if rec.State != store.StateUnknown || rec.Retention != retention {
					t.Errorf("%s: %s, Retention %v; want UNKNOWN with its attempt's %v", via, rec.State, rec.Retention, retention)
				}
			}
		})
	}
}
