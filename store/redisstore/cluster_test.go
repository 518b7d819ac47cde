package redisstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testinfra/redistopo"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storetest"
)

// topologyLong reports whether the slow, larger versions of the topology
// tests run: IDEM_TEST_TOPOLOGY=long. The default versions are short.
func topologyLong() bool { return os.Getenv("IDEM_TEST_TOPOLOGY") == "long" }

// needTopology skips the tests that start their own Redis servers under
// -short.
func needTopology(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a multi-node Redis topology; skipped under -short")
	}
}

// TestCluster runs the store on a 3-primary Redis Cluster, each primary
// with one replica, through a go-redis cluster client.
func TestCluster(t *testing.T) {
	needTopology(t)
	cl := redistopo.StartCluster(t, 3, 1)
	// The client comes from the URL form the gateway's --store takes.
	uc, err := redisstore.ParseURL("redis-cluster://" + strings.Join(cl.Addrs(), ",") + "?pool_size=64")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	client, ok := uc.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("ParseURL(redis-cluster://...) = %T, want *redis.ClusterClient", uc)
	}
	newStore := func(t *testing.T, opts *redisstore.Options) *redisstore.Store {
		o := redisstore.Options{Prefix: testenv.Prefix(t)}
		if opts != nil {
			o.ReplicaAcks, o.ReplicaAckTimeout = opts.ReplicaAcks, opts.ReplicaAckTimeout
		}
		s, err := redisstore.New(client, &o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	t.Run("KeysOfOneIDShareASlot", func(t *testing.T) {
		s := newStore(t, nil)
		node := redistopo.Client(t, cl.Nodes[0])
		for _, id := range []store.ID{{Tenant: "acme", Key: "order-42"}, {Tenant: "a}b", Key: "c{d}e"},
			{Tenant: "", Key: "}"}, {Tenant: "t", Key: "{"}, {Tenant: "ünï", Key: "ключ"}} {
			rec := s.RecordKey(id)
			want, err := node.ClusterKeySlot(context.Background(), rec).Result()
			if err != nil {
				t.Fatal(err)
			}
			fence, err := node.ClusterKeySlot(context.Background(), rec+":f").Result()
			if err != nil {
				t.Fatal(err)
			}
			if fence != want || int64(redistopo.Slot(rec)) != want {
				t.Errorf("%+v: record slot %d, fence counter slot %d, redistopo.Slot %d; want all equal", id, want, fence, redistopo.Slot(rec))
			}
		}
	})

	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, storetest.Harness{
			New: func(t *testing.T) (store.Store, func(time.Duration)) { return newStore(t, nil), storetest.Sleep },
		})
	})

	// rueidis on the cluster, from the URL form with ?near_cache=on, its
	// scripts as functions: the library is loaded on every primary.
	t.Run("ConformanceRueidisNearCacheFunctions", func(t *testing.T) {
		storetest.Run(t, storetest.Harness{
			New: func(t *testing.T) (store.Store, func(time.Duration)) {
				s, err := redisstore.OpenURL("redis-cluster://"+strings.Join(cl.Addrs(), ",")+"?near_cache=on",
					&redisstore.Options{Prefix: testenv.Prefix(t), Functions: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s, storetest.Sleep
			},
		})
	})

	t.Run("ConformanceWithReplicaAcks", func(t *testing.T) {
		storetest.Run(t, storetest.Harness{
			New: func(t *testing.T) (store.Store, func(time.Duration)) {
				// A replica's ack may take long on a loaded machine; below the client's 3s read timeout.
				return newStore(t, &redisstore.Options{ReplicaAcks: 1, ReplicaAckTimeout: 2 * time.Second}), storetest.Sleep
			},
		})
	})

	t.Run("BurstAcrossPrimaries", func(t *testing.T) {
		keys, contenders := 150, 8
		if topologyLong() {
			keys = 2000
		}
		s := newStore(t, nil)
		ids := make([]store.ID, keys)
		owners := map[string]bool{}
		for i := range ids {
			ids[i] = store.ID{Tenant: "burst", Key: rand.Text()}
			owner, err := redistopo.SlotOwner(context.Background(), redistopo.Client(t, cl.Nodes[0]), redistopo.Slot(s.RecordKey(ids[i])))
			if err != nil {
				t.Fatal(err)
			}
			owners[owner] = true
		}
		if len(owners) != 3 {
			t.Fatalf("the keys landed on %d primaries, want all 3", len(owners))
		}
		winners := make([]atomic.Int32, keys)
		var errs atomic.Int32
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i, id := range ids {
			for range contenders {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					res, err := s.Acquire(context.Background(), store.AcquireParams{ID: id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: time.Minute})
					switch {
					case err != nil:
						errs.Add(1)
						t.Errorf("acquire %v: %v", id, err)
					case res.Acquired:
						winners[i].Add(1)
					}
				}()
			}
		}
		wg.Wait()
		for i := range winners {
			if n := winners[i].Load(); n != 1 {
				t.Errorf("key %v: %d winners among %d contenders, want exactly 1", ids[i], n, contenders)
			}
		}
		t.Logf("%d keys over 3 primaries, %d contenders each: one winner per key, %d errors", keys, contenders, errs.Load())
	})

	t.Run("ReplicaAckWaitsOnTheOwningPrimary", func(t *testing.T) {
		// The paused replica is waited for this long; the live one must
		// answer within it, on a loaded machine too.
		s := newStore(t, &redisstore.Options{ReplicaAcks: 1, ReplicaAckTimeout: time.Second})
		ctx := context.Background()
		paused := store.ID{Tenant: "ack", Key: rand.Text()}
		owner, err := redistopo.SlotOwner(ctx, redistopo.Client(t, cl.Nodes[0]), redistopo.Slot(s.RecordKey(paused)))
		if err != nil {
			t.Fatal(err)
		}
		var other store.ID // a key on another primary, whose replica keeps up
		for {
			other = store.ID{Tenant: "ack", Key: rand.Text()}
			o, err := redistopo.SlotOwner(ctx, redistopo.Client(t, cl.Nodes[0]), redistopo.Slot(s.RecordKey(other)))
			if err != nil {
				t.Fatal(err)
			}
			if o != owner {
				break
			}
		}
		replicas, err := cl.ReplicasOf(ctx, owner)
		if err != nil || len(replicas) != 1 {
			t.Fatalf("replicas of %s: %v, %v", owner, replicas, err)
		}
		if err := replicas[0].Pause(); err != nil {
			t.Fatal(err)
		}
		_, errPaused := s.Acquire(ctx, store.AcquireParams{ID: paused, Owner: "o", Fingerprint: "fp", LeaseDuration: time.Minute})
		resOther, errOther := s.Acquire(ctx, store.AcquireParams{ID: other, Owner: "o", Fingerprint: "fp", LeaseDuration: time.Minute})
		if err := replicas[0].Resume(); err != nil {
			t.Fatal(err)
		}
		// A WAIT sent to any other primary would have counted its healthy
		// replica and passed.
		if !errors.Is(errPaused, redisstore.ErrNotReplicated) {
			t.Errorf("acquire while the owning primary's replica is paused = %v; want ErrNotReplicated", errPaused)
		}
		if errOther != nil || !resOther.Acquired {
			t.Errorf("acquire on a primary with a live replica = %+v, %v; want acquired", resOther, errOther)
		}
		if _, err := s.Get(ctx, paused); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get of the fail-closed key = %v; want ErrNotFound (released)", err)
		}
	})

	// A slot moves while traffic runs; then another moves, to the first
	// one's old primary, with ReplicaAcks on (whose pinned pipeline
	// follows MOVED and ASK itself).
	var from string
	t.Run("SlotMigrationMidRun", func(t *testing.T) {
		from, _ = migrationRun(t, cl, newStore(t, nil), "")
	})
	t.Run("SlotMigrationMidRunWithReplicaAcks", func(t *testing.T) {
		if from == "" {
			t.Skip("the first migration did not run")
		}
		migrationRun(t, cl, newStore(t, &redisstore.Options{ReplicaAcks: 1}), from)
	})
}

// migrationRun moves the slot of a set of keys to another primary (to, or
// any other when empty) while contenders acquire, complete and replay
// those keys, and checks that no key was acquired twice, no completed
// record was lost, and every contender got an answer after retrying
// errors, as a client retries a 503.
func migrationRun(t *testing.T, cl *redistopo.Cluster, s *redisstore.Store, to string) (from, dest string) {
	ctx := context.Background()
	n, workers, contenders := 120, 6, 3
	if topologyLong() {
		n, workers = 600, 12
	}
	via := redistopo.Client(t, cl.Nodes[0])
	var slot int
	for from == "" || from == to { // a slot that is not on the target already
		slot = redistopo.Slot(s.RecordKey(store.ID{Tenant: "mig", Key: rand.Text()}))
		var err error
		if from, err = redistopo.SlotOwner(ctx, via, slot); err != nil {
			t.Fatal(err)
		}
	}
	if to == "" {
		for _, node := range cl.Nodes {
			role, _ := redistopo.Client(t, node).Do(ctx, "role").Slice()
			if len(role) > 0 && role[0] == "master" && node.Addr != from {
				to = node.Addr
				break
			}
		}
	}
	ids := idsInSlot(s, slot, n)
	// Half the keys are completed before the move, so there is data to
	// migrate and results to replay while it moves.
	winner := make([]atomic.Value, n) // owner string of the one acquirer
	for i := range n / 2 {
		owner := rand.Text()
		res, err := s.Acquire(ctx, store.AcquireParams{ID: ids[i], Owner: owner, Fingerprint: "fp", LeaseDuration: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire before the move: %+v, %v", res, err)
		}
		winner[i].Store(owner)
		if err := s.Complete(ctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: ids[i], Owner: owner, Fence: res.Record.Fence},
			Result: store.Result{Status: 201, Body: []byte(owner)}, Retention: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}

	var doubles, retried, gaveUp, rounds atomic.Int64
	var kindsMu sync.Mutex
	kinds := map[string]int{} // the retried errors, by kind
	noteRetry := func(err error) {
		retried.Add(1)
		kind := err.Error()
		if i := strings.IndexAny(kind, "0123456789"); i > 0 {
			kind = kind[:i] // drop slot numbers and addresses
		}
		kindsMu.Lock()
		if kinds[kind] == 0 {
			t.Logf("first %q: %v", kind, err)
		}
		kinds[kind]++
		kindsMu.Unlock()
	}
	done := make(chan struct{})
	// A round done since the last receive: traffic before and after the
	// move is counted in rounds, not timed.
	roundDone := make(chan struct{}, 1)
	waitRounds := func(n int) {
		for range n {
			<-roundDone
		}
	}
	// Errors are retried as a client retries a 503, until the slot has
	// long finished moving on a loaded machine.
	giveUp := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := w; ; r += workers {
				select {
				case <-done:
					return
				default:
				}
				rounds.Add(1)
				i := r % n
				var cw sync.WaitGroup
				for range contenders {
					cw.Go(func() {
						owner := rand.Text()
						var res store.AcquireResult
						var err error
						for {
							res, err = s.Acquire(ctx, store.AcquireParams{ID: ids[i], Owner: owner, Fingerprint: "fp", LeaseDuration: time.Minute})
							if err == nil || time.Now().After(giveUp) {
								break
							}
							noteRetry(err)
							time.Sleep(5 * time.Millisecond)
						}
						if err != nil {
							gaveUp.Add(1)
							t.Errorf("acquire %v: still failing after retries: %v", ids[i], err)
							return
						}
						if !res.Acquired {
							return
						}
						if !winner[i].CompareAndSwap(nil, owner) {
							doubles.Add(1)
							t.Errorf("key %v acquired twice: by %v and %v", ids[i], winner[i].Load(), owner)
							return
						}
						ref := store.LeaseRef{ID: ids[i], Owner: owner, Fence: res.Record.Fence}
						for {
							err = s.Complete(ctx, store.CompleteParams{LeaseRef: ref, Result: store.Result{Status: 201, Body: []byte(owner)}, Retention: time.Minute})
							if err == nil || errors.Is(err, store.ErrLeaseLost) || time.Now().After(giveUp) {
								break
							}
							noteRetry(err)
							time.Sleep(5 * time.Millisecond)
						}
						if err != nil {
							t.Errorf("complete %v by its one winner: %v", ids[i], err)
						}
					})
				}
				cw.Wait()
				select {
				case roundDone <- struct{}{}:
				default:
				}
			}
		})
	}
	waitRounds(2*workers + 1) // traffic first, then the move
	migErr := cl.MigrateSlot(ctx, slot, to, 8, 15*time.Millisecond)
	waitRounds(2*workers + 1) // and traffic after it
	close(done)
	wg.Wait()
	if migErr != nil {
		t.Fatalf("migrate slot %d from %s to %s: %v", slot, from, to, migErr)
	}
	if owner, err := redistopo.SlotOwner(ctx, via, slot); err != nil || owner != to {
		t.Fatalf("slot %d is on %s (%v) after the move, want %s", slot, owner, err, to)
	}
	// Every key that was acquired holds its one winner's result, now on
	// the new primary.
	for i, id := range ids {
		w, _ := winner[i].Load().(string)
		rec, err := s.Get(ctx, id)
		switch {
		case w == "" && errors.Is(err, store.ErrNotFound):
		case err != nil:
			t.Errorf("Get %v after the move: %v (winner %q)", id, err, w)
		case rec.Owner != w || rec.State != store.StateCompleted || string(rec.Result.Body) != w:
			t.Errorf("Get %v after the move = owner %q state %v; want completed by %q", id, rec.Owner, rec.State, w)
		}
	}
	t.Logf("slot %d moved %s -> %s under %d rounds of %d contenders: %d double acquisitions, %d retried errors, %d gave up",
		slot, from, to, rounds.Load(), contenders, doubles.Load(), retried.Load(), gaveUp.Load())
	for kind, n := range kinds {
		t.Logf("  retried %d× %q", n, kind)
	}
	return from, to
}

// idsInSlot returns n IDs whose records are in the given cluster slot.
func idsInSlot(s *redisstore.Store, slot, n int) []store.ID {
	base := rand.Text()[:6]
	var ids []store.ID
	for i := 0; len(ids) < n; i++ {
		id := store.ID{Tenant: "mig", Key: base + "-" + strconv.Itoa(i)}
		if redistopo.Slot(s.RecordKey(id)) == slot {
			ids = append(ids, id)
		}
	}
	return ids
}
