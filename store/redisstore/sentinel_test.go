package redisstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testinfra/redistopo"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/redisstore"
)

// TestSentinelFailover kills the primary of a primary + 2 replicas + 3
// Sentinels topology while traffic runs, with replica acknowledgement off
// and on. It checks that the store, through one go-redis failover client,
// follows the promoted replica without a restart, and counts double
// executions: keys whose acquisition was acknowledged before the failover
// and that a second owner acquires again after it, because the record was
// lost with the old primary, and what that does to a payment.
//
// Every acquired key runs the article's payment flow against a fake
// provider that counts its charges per key, and against the real
// PostgreSQL. Half of the keys (alternating) run it with the guardrail:
// pgstore.Reserve in the worker's own transaction before the charge, then
// Settle and Commit; a worker that gets ErrDuplicate reads the existing
// reservation and does not charge. The other half charge on the lease
// alone. Both halves live through the same failover, so they meet the
// same fault.
//
// Two faults: a plain crash (SIGKILL of the primary), and a crash after
// the replication links broke: both replicas stall (SIGSTOP) and the
// primary drops their connections (CLIENT KILL TYPE replica), so for 300ms
// the primary acknowledges writes that no replica receives, then dies, as
// after a partition between primary and replicas. The default run has one
// link-loss crash per setting; IDEM_TEST_TOPOLOGY=long runs 3 of each
// fault per setting.
func TestSentinelFailover(t *testing.T) {
	needTopology(t)
	redis.SetLogger(quietLogger{}) // go-redis logs every failed dial while the primary is down
	rounds, faults := 1, []bool{true}
	if topologyLong() {
		rounds, faults = 3, []bool{false, true}
	}
	for _, linkLoss := range faults {
		// rueidis (idem serve's client) has no ReplicaAcks: WAIT needs the
		// connection that ran the script, which a pipelining client does
		// not pin.
		for _, c := range []struct {
			acks    int
			rueidis bool
		}{{0, false}, {1, false}, {0, true}} {
			acks := c.acks
			name := map[bool]string{false: "Crash", true: "CrashAfterLinkLoss"}[linkLoss] + map[bool]string{false: "/ReplicaAcksOff", true: "/ReplicaAcksOn"}[acks > 0]
			if c.rueidis {
				name += "/rueidis"
			}
			t.Run(name, func(t *testing.T) {
				// Each configuration has its own topology and schema, and
				// most of its time is waiting: Sentinels meeting, an
				// election, an orphaned acquire's landing window.
				t.Parallel()
				var sum [2]failoverCounts // by guardrail: [0] off, [1] on
				var errs int
				for round := range rounds {
					// A subtest per failover, so each topology is stopped
					// before the next starts.
					t.Run("failover-"+strconv.Itoa(round+1), func(t *testing.T) {
						counts, e := failoverRun(t, acks, linkLoss, c.rueidis)
						for g := range sum {
							sum[g].add(counts[g])
						}
						errs += e
					})
				}
				for g, c := range sum {
					t.Logf("linkLoss=%v ReplicaAcks=%d guardrail=%v, %d failover(s): %d acknowledged acquisitions, %d acquired again after failover, %d charged twice, %d reserved twice, %d refused by Reserve (ErrDuplicate)",
						linkLoss, acks, g == 1, rounds, c.acquired, c.reacquired, c.doubleCharges, c.doubleReservations, c.refused)
				}
				t.Logf("%d errors (503) during failover", errs)
				reacquired := sum[0].reacquired + sum[1].reacquired
				// With acks on, every acquisition handed out had reached a
				// replica, and Sentinel promotes the replica with the
				// highest replication offset.
				if acks > 0 && reacquired > 0 {
					t.Errorf("%d double acquisitions with ReplicaAcks=1", reacquired)
				}
				// Without acks, the writes of the link-loss window are lost: if
				// none were, the fault did not happen and the test proves
				// nothing. Both halves must meet it, so the guardrail is
				// shown to stop a real second execution.
				if acks == 0 && linkLoss {
					for g, c := range sum {
						if c.reacquired == 0 {
							t.Errorf("guardrail=%v: no acquisition was lost with ReplicaAcks=0 after replica lag; the fault did not take effect", g == 1)
						}
					}
					if sum[0].doubleCharges == 0 {
						t.Errorf("no key was charged twice without the guardrail although %d were acquired again", sum[0].reacquired)
					}
				}
				// The guardrail holds in every mode: the reservation row is
				// in PostgreSQL, which did not fail over, and it is what stopped
				// every second owner.
				if c := sum[1]; c.doubleCharges > 0 || c.doubleReservations > 0 || c.refused != c.reacquired {
					t.Errorf("with the guardrail: %d keys charged twice, %d reserved twice, %d of %d second owners refused by Reserve; want 0, 0 and all",
						c.doubleCharges, c.doubleReservations, c.refused, c.reacquired)
				}
			})
		}
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// failoverCounts is what one mode (guardrail off or on) saw in a failover.
type failoverCounts struct {
	acquired           int // keys acquired and charged before the failover was over
	reacquired         int // of those, keys a second owner acquired after it
	doubleCharges      int // keys the provider charged twice
	doubleReservations int // keys whose reservation two transactions committed
	refused            int // second executions that Reserve refused (ErrDuplicate)
}

func (c *failoverCounts) add(o failoverCounts) {
	c.acquired += o.acquired
	c.reacquired += o.reacquired
	c.doubleCharges += o.doubleCharges
	c.doubleReservations += o.doubleReservations
	c.refused += o.refused
}

// chargeCounter is a fake payment provider that charges every call: it
// does not deduplicate by key, so every execution of the work shows as a
// charge. It counts them per key.
type chargeCounter struct {
	mu      sync.Mutex
	charges map[string][]string // key -> the charge ids made for it
}

// Charge charges key once more and returns the charge's id.
func (p *chargeCounter) Charge(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := fmt.Sprintf("ch_%s_%d", key, len(p.charges[key])+1)
	p.charges[key] = append(p.charges[key], id)
	return id
}

func (p *chargeCounter) count(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.charges[key])
}

// payment runs the work of one acquired key, with or without the guardrail.
type payment struct {
	pg       *pgstore.Store
	pool     *pgxpool.Pool // the pool pg runs on, for the work's own transactions
	provider *chargeCounter
	mu       sync.Mutex
	commits  map[string]int // key -> transactions that committed its reservation
	refused  map[string]int // key -> reservations refused with ErrDuplicate
}

// run is the article's flow for the lease holder with fence: with the
// guardrail, reserve the key in a transaction before the charge, charge,
// settle with the charge id, commit; a duplicate reservation returns the
// recorded charge id without charging. Without it, just charge.
func (p *payment) run(ctx context.Context, id store.ID, fence int64, guardrail bool) (string, error) {
	if !guardrail {
		return p.provider.Charge(id.Key), nil
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // a no-op after Commit
	err = p.pg.Reserve(ctx, tx, id.Tenant, id.Key, fence)
	if errors.Is(err, pgstore.ErrDuplicate) {
		tx.Rollback(ctx)
		p.mu.Lock()
		p.refused[id.Key]++
		p.mu.Unlock()
		r, err := p.pg.Reservation(ctx, p.pool, id.Tenant, id.Key)
		if err != nil {
			return "", err
		}
		return string(r.Outcome), nil
	}
	if err != nil {
		return "", err
	}
	charge := p.provider.Charge(id.Key)
	if err := p.pg.Settle(ctx, tx, id.Tenant, id.Key, fence, []byte(charge)); err != nil {
		return "", err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", err
	}
	p.mu.Lock()
	p.commits[id.Key]++
	p.mu.Unlock()
	return charge, nil
}

// failoverRun starts a topology, runs payments on it while it fails over,
// and returns the counts by guardrail ([0] off, [1] on) and the number of
// acquisitions that failed during the failover.
func failoverRun(t *testing.T, acks int, linkLoss, rueidis bool) (counts [2]failoverCounts, errs int) {
	topo := redistopo.StartSentinel(t, 2, 3)
	// The client comes from the URL form the gateway's --store takes.
	uri := "redis-sentinel://" + strings.Join(topo.SentinelAddrs(), ",") + "/" + redistopo.MasterName
	opts := &redisstore.Options{Prefix: "idemtest:failover:", ReplicaAcks: acks, ReplicaAckTimeout: 200 * time.Millisecond}
	var s *redisstore.Store
	var err error
	if rueidis {
		s, err = redisstore.OpenURL(uri+"?client=rueidis", opts)
	} else {
		s, err = redisstore.OpenURL(uri+"?pool_size=64", opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// Failed completes and acquires during the failover are expected here;
	// the engine's log lines about them would drown the test's output.
	engine, err := idem.New(s, &idem.Options{LeaseDuration: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// Completes the failover cut are held and retried in the background;
	// they are stored (or dropped, if the failover lost their record)
	// before the topology stops, as the gateway does at shutdown.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := engine.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown after the failover: %v", err)
		}
	})
	ctx := context.Background()
	pool, schema := testenv.Postgres(t)
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	pg, err := pgstore.New(pool, &pgstore.Options{Schema: schema, ReapInterval: -1}) // the guardrail only: no records to reap
	if err != nil {
		t.Fatal(err)
	}
	pay := &payment{pg: pg, pool: pool, provider: &chargeCounter{charges: map[string][]string{}}, commits: map[string]int{}, refused: map[string]int{}}
	// guarded tells the two halves apart by key.
	guarded := func(id store.ID) bool { return strings.HasPrefix(id.Key, "g-") }
	// attempt begins an attempt at id and, if it acquires the key, runs the
	// payment and completes the key with the charge id. It reports whether
	// the key was acquired; a failed complete (the failover) leaves the key
	// PROCESSING until its lease ends, as in production.
	attempt := func(ctx context.Context, id store.ID) (bool, error) {
		att, err := engine.Begin(ctx, idem.Request{Tenant: id.Tenant, Key: id.Key, Fingerprint: "fp"})
		if err != nil || att.Outcome != idem.Acquired {
			return false, err
		}
		// The payment gets its own deadline rather than the lease's
		// context, which ends with the short acquire timeout: cut between
		// the charge and the commit, it would leave a charge without a
		// reservation, a fault of the payment, not of the failover
		// measured here (PostgreSQL is not faulted in this test).
		payCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		charge, err := pay.run(payCtx, id, att.Lease.Fence(), guarded(id))
		if err != nil {
			att.Lease.Release(ctx)
			t.Errorf("payment for %v: %v", id, err)
			return true, nil
		}
		att.Lease.Complete(ctx, store.Result{Status: 201, Body: []byte(charge)})
		return true, nil
	}
	var (
		mu         sync.Mutex
		held       []store.ID // acquisitions the store acknowledged, and paid for
		nErr, nOK  atomic.Int64
		seq        atomic.Int64
		attempted  = make(chan struct{}, 1) // an acquisition ended since the last receive
		stop       = make(chan struct{})
		wg         sync.WaitGroup
		workers    = 8
		acquireOne = func() {
			id := store.ID{Tenant: "fo", Key: map[bool]string{false: "n-", true: "g-"}[seq.Add(1)%2 == 0] + rand.Text()}
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			defer func() {
				select {
				case attempted <- struct{}{}:
				default:
				}
			}()
			acquired, err := attempt(ctx, id)
			if err != nil {
				nErr.Add(1)
				time.Sleep(10 * time.Millisecond)
				return
			}
			if !acquired {
				t.Errorf("a fresh key %v was not acquired", id)
				return
			}
			nOK.Add(1)
			mu.Lock()
			held = append(held, id)
			mu.Unlock()
		}
	)
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					acquireOne()
				}
			}
		})
	}
	// The phases of the fault last a number of acquisitions, not a time:
	// on a loaded machine each still sees traffic, in both halves.
	waitAttempts := func(n int) {
		for range n {
			<-attempted
		}
	}
	waitAttempts(20)
	old := topo.Primary.Addr
	if linkLoss {
		for _, r := range topo.Replicas {
			if err := r.Pause(); err != nil {
				t.Fatal(err)
			}
		}
		if err := redistopo.Client(t, topo.Primary).Do(ctx, "client", "kill", "type", "replica").Err(); err != nil {
			t.Fatal(err)
		}
		waitAttempts(20) // acquisitions the replicas do not see
	}
	topo.Primary.Kill()
	if linkLoss {
		for _, r := range topo.Replicas {
			if err := r.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Promotion takes a few seconds; a failed election is retried after
	// twice the failover timeout, so a loaded machine may need longer.
	deadline := time.Now().Add(60 * time.Second)
	dumpLogs := func() {
		for _, sn := range topo.Sentinels {
			t.Logf("sentinel %s log:\n%s", sn.Addr, sn.Log(30))
		}
	}
	for {
		addr, err := topo.CurrentPrimary(ctx)
		if err == nil && addr != old {
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			dumpLogs()
			t.Fatalf("Sentinel did not promote a replica within 60s (last: %q, %v)", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The same store, without a restart, must serve again on the new primary.
	after := nOK.Load()
	for nOK.Load() < after+100 {
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			dumpLogs()
			t.Fatalf("the store did not serve 100 acquisitions on the new primary within 60s of the crash (errors: %d)", nErr.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	// The client's retry of every paid key: a second owner that acquires
	// it runs the payment again.
	for _, id := range held {
		c := &counts[map[bool]int{false: 0, true: 1}[guarded(id)]]
		c.acquired++
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		acquired, err := attempt(ctx, id)
		cancel()
		if err != nil {
			t.Fatalf("retry after failover: %v", err)
		}
		if acquired {
			c.reacquired++
		}
		if pay.provider.count(id.Key) > 1 {
			c.doubleCharges++
		}
		pay.mu.Lock()
		if pay.commits[id.Key] > 1 {
			c.doubleReservations++
		}
		c.refused += pay.refused[id.Key]
		pay.mu.Unlock()
	}
	// What PostgreSQL holds must agree: one settled reservation per
	// guarded key, carrying the charge that was made for it.
	for _, id := range held {
		if !guarded(id) {
			continue
		}
		r, err := pg.Reservation(ctx, pool, id.Tenant, id.Key)
		if err != nil {
			t.Fatalf("reservation of %v: %v", id, err)
		}
		if want := "ch_" + id.Key + "_1"; string(r.Outcome) != want || r.SettledAt.IsZero() {
			t.Errorf("reservation of %v: outcome %q, settled %v; want %q, settled", id, r.Outcome, r.SettledAt, want)
		}
	}
	return counts, int(nErr.Load())
}
