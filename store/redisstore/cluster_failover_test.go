package redisstore_test

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/redistopo"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// failoverServedBound is how soon after a replica's promotion the store
// must serve its shard's keys again: a deadline on a loaded machine, far
// above the ~1s the store takes, and far below go-redis's own periodic
// reload of the slot map (ClusterStateReloadInterval, 60s by default),
// which was all that moved a running client to the new primary before.
const failoverServedBound = 10 * time.Second

// TestClusterFailover SIGKILLs a shard's primary while traffic runs, on a
// 3-primary cluster whose primaries have two replicas each (so that the
// promoted one still has a replica, for ReplicaAcks), once per client: a
// go-redis cluster client (ParseURL), the same with ReplicaAcks (whose
// script and WAIT go to the node MasterForKey names), and rueidis with the
// near cache (OpenURL). Each run kills another shard's primary. It checks
// that the running store serves the shard's keys again within
// failoverServedBound of the promotion, and that no key acquired before
// the kill is acquired again by another owner unless the failover lost
// its record (asynchronous replication: see the package documentation).
func TestClusterFailover(t *testing.T) {
	needTopology(t)
	redis.SetLogger(quietLogger{}) // go-redis logs every failed dial while the primary is down
	cl := redistopo.StartCluster(t, 3, 2)
	liveURL := func(query string) string {
		var addrs []string
		for _, n := range cl.Nodes {
			if n.Alive() {
				addrs = append(addrs, n.Addr)
			}
		}
		return "redis-cluster://" + strings.Join(addrs, ",") + query
	}
	goredisStore := func(t *testing.T, o redisstore.Options) *redisstore.Store {
		client, err := redisstore.ParseURL(liveURL("?pool_size=32"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		o.Prefix = testenv.Prefix(t)
		s, err := redisstore.New(client, &o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("GoRedis", func(t *testing.T) {
		clusterFailoverRun(t, cl, goredisStore(t, redisstore.Options{}))
	})
	t.Run("GoRedisReplicaAcks", func(t *testing.T) {
		clusterFailoverRun(t, cl, goredisStore(t, redisstore.Options{ReplicaAcks: 1, ReplicaAckTimeout: time.Second}))
	})
	t.Run("RueidisNearCache", func(t *testing.T) {
		s, err := redisstore.OpenURL(liveURL("?near_cache=on"), &redisstore.Options{Prefix: testenv.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		clusterFailoverRun(t, cl, s)
	})
}

// ackedKey is an acquisition the store acknowledged during a failover run.
type ackedKey struct {
	id    store.ID
	owner string
	// strict: its record must survive the failover. It reached the
	// promoted replica (the old primary's replication offset read after
	// the acknowledgement is within what the replica had), or it was made
	// after the promotion.
	strict bool
	offset int64 // the old primary's offset read after the ack; -1 when unread
}

// clusterFailoverRun kills the primary of one shard of cl while workers
// acquire and complete fresh keys (three in four on that shard), waits for
// a replica's promotion, and checks what TestClusterFailover says.
func clusterFailoverRun(t *testing.T, cl *redistopo.Cluster, s *redisstore.Store) {
	ctx := context.Background()
	primary, replicas, err := cl.Shard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := redistopo.SlotOwners(ctx, redistopo.Client(t, replicas[0]))
	if err != nil {
		t.Fatal(err)
	}
	victim := primary.Addr
	freshID := func(onVictim bool) store.ID {
		for {
			id := store.ID{Tenant: "fo", Key: rand.Text()}
			if (owners[redistopo.Slot(s.RecordKey(id))] == victim) == onVictim {
				return id
			}
		}
	}
	direct := redistopo.Client(t, primary) // the old primary's replication offset
	offsetNow := func() int64 {
		octx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		v, err := redisproc.InfoField(octx, direct, "replication", "master_repl_offset")
		if err != nil {
			return -1
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1
		}
		return n
	}

	var (
		mu           sync.Mutex
		acked        []ackedKey // guarded by mu
		errKinds     = map[string]int{}
		lastErr      error        // guarded by mu
		promotedAt   atomic.Int64 // UnixNano of the promotion seen; 0 before
		served       atomic.Int64 // victim-shard acquisitions begun after the promotion
		firstServed  atomic.Int64 // UnixNano of the first of them
		okBefore     atomic.Int64 // victim-shard acquisitions before the kill
		victimErrs   atomic.Int64
		otherErrs    atomic.Int64
		completeErrs atomic.Int64
		progress     = make(chan struct{}, 1)
		stop         = make(chan struct{})
		wg           sync.WaitGroup
		killed       atomic.Bool
	)
	work := func(i int) {
		onVictim := i%4 != 3
		id, owner := freshID(onVictim), rand.Text()
		afterPromotion := promotedAt.Load() != 0
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := s.Acquire(actx, store.AcquireParams{ID: id, Owner: owner, Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Hour})
		cancel()
		if err != nil {
			if onVictim {
				victimErrs.Add(1)
			} else {
				otherErrs.Add(1)
			}
			kind := err.Error()
			if j := strings.IndexAny(kind, "0123456789"); j > 0 {
				kind = kind[:j] // drop addresses and slot numbers
			}
			mu.Lock()
			errKinds[kind]++
			lastErr = err
			mu.Unlock()
			select { // a client's pause before it retries a 503
			case <-stop:
			case <-time.After(10 * time.Millisecond):
			}
			return
		}
		if !res.Acquired {
			t.Errorf("a fresh key %v was not acquired: %+v", id, res)
			return
		}
		k := ackedKey{id: id, owner: owner, offset: -1, strict: afterPromotion}
		if onVictim && !killed.Load() {
			k.offset = offsetNow()
			okBefore.Add(1)
		}
		if !onVictim {
			k.strict = true // its shard did not fail over
		}
		if onVictim && afterPromotion {
			if served.Add(1) == 1 {
				firstServed.Store(time.Now().UnixNano())
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err = s.Complete(cctx, store.CompleteParams{LeaseRef: store.LeaseRef{ID: id, Owner: owner, Fence: res.Record.Fence},
			Result: store.Result{Status: 201, Body: []byte(owner)}, Retention: time.Hour})
		cancel()
		if err != nil {
			// Cut by the kill: the record stays PROCESSING until its
			// lease ends, and a retry finds it in flight.
			completeErrs.Add(1)
		}
		mu.Lock()
		acked = append(acked, k)
		mu.Unlock()
		select {
		case progress <- struct{}{}:
		default:
		}
	}
	for w := range 6 {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				work(i)
			}
		})
	}
	finish := func() {
		close(stop)
		wg.Wait()
	}
	for okBefore.Load() < 40 { // traffic on the shard first
		select {
		case <-progress:
		case <-time.After(30 * time.Second):
			finish()
			t.Fatalf("no traffic on the shard before the kill (%d acquisitions)", okBefore.Load())
		}
	}
	killed.Store(true)
	primary.Kill()
	killedAt := time.Now()
	// Failure detection (cluster-node-timeout, 3s) and the election take a
	// few seconds; a loaded machine may take longer.
	var promoted *redistopo.Server
	tick := time.NewTicker(20 * time.Millisecond)
	for promoted == nil {
		if time.Since(killedAt) > time.Minute {
			finish()
			t.Fatalf("no replica of %s was promoted within a minute", victim)
		}
		<-tick.C
		promoted = redistopo.Promoted(ctx, replicas)
	}
	promotedAt.Store(time.Now().UnixNano())
	promotion := time.Since(killedAt)
	deadline := time.Now().Add(failoverServedBound)
	for served.Load() < 20 && time.Now().Before(deadline) {
		<-tick.C
	}
	tick.Stop()
	finish()
	mu.Lock()
	defer mu.Unlock()
	if served.Load() < 20 {
		t.Errorf("the store served %d acquisitions on the failed-over shard within %v of the promotion of %s (killed %s); want 20 (last error: %v)",
			served.Load(), failoverServedBound, promoted.Addr, victim, lastErr)
	}
	// What the promoted replica had of the old primary's stream: its
	// offsets below second_repl_offset.
	pc := redistopo.Client(t, promoted)
	v, err := redisproc.InfoField(ctx, pc, "replication", "second_repl_offset")
	if err != nil {
		t.Fatal(err)
	}
	replicated, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Every acknowledged acquisition, tried again by another owner, as a
	// client retries: only one whose record the failover lost may run again.
	// The retries begin when every live node has learnt the promotion; a
	// CLUSTERDOWN answer (a node that has not, or that saw itself in a
	// minority on a loaded machine) is a 503 the client retries once the
	// cluster reports ok again, as it would later.
	cl.WaitOK(t)
	var strict, atRisk, lost, clusterDown int
	retry := func(k ackedKey) (store.AcquireResult, error) {
		for attempt := 0; ; attempt++ {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			res, err := s.Acquire(rctx, store.AcquireParams{ID: k.id, Owner: rand.Text(), Fingerprint: "fp", LeaseDuration: time.Minute, Retention: time.Hour})
			cancel()
			if err == nil || attempt == 3 || !strings.Contains(err.Error(), "CLUSTERDOWN") {
				return res, err
			}
			clusterDown++
			cl.WaitOK(t)
		}
	}
	for _, k := range acked {
		if k.offset >= 0 && k.offset < replicated {
			k.strict = true
		}
		if k.strict {
			strict++
		} else {
			atRisk++
		}
		res, err := retry(k)
		switch {
		case err != nil:
			t.Errorf("retry of %v after the failover: %v", k.id, err)
		case res.Acquired && k.strict:
			t.Errorf("key %v (acquired by %s, replicated or made after the promotion) acquired again by another owner", k.id, k.owner)
		case res.Acquired:
			lost++
		}
	}
	if strict == 0 {
		t.Error("no acquisition was known to be replicated: the check of double acquisitions checked nothing")
	}
	var first time.Duration
	if f := firstServed.Load(); f != 0 {
		first = time.Duration(f - promotedAt.Load())
	}
	t.Logf("killed %s; %s promoted %v later; first acquisition on the shard %v after the promotion, %d within %v; "+
		"%d acquisitions before the kill; acquire errors: %d on the shard, %d on the others; %d completes failed",
		victim, promoted.Addr, promotion.Round(time.Millisecond), first.Round(time.Millisecond), served.Load(), failoverServedBound,
		okBefore.Load(), victimErrs.Load(), otherErrs.Load(), completeErrs.Load())
	t.Logf("%d acknowledged acquisitions retried: %d replicated or later (none may run again), %d acknowledged in the last moments before the kill, of which %d were lost with the old primary and ran again; %d retries answered CLUSTERDOWN and were made again",
		len(acked), strict, atRisk, lost, clusterDown)
	for kind, n := range errKinds {
		t.Logf("  %d× %q", n, kind)
	}
}
