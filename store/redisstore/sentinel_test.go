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

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/redistopo"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestSentinelFailover kills the primary of a primary + 2 replicas + 3
// Sentinels topology while traffic runs, with replica acknowledgement off
// and on. It checks that the store, through one go-redis failover client,
// follows the promoted replica without a restart, and counts double
// acquisitions: keys whose acquisition was acknowledged before the
// failover and that a second owner acquires again after it, because the
// record was lost with the old primary.
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
		for _, acks := range []int{0, 1} {
			name := map[bool]string{false: "Crash", true: "CrashAfterLinkLoss"}[linkLoss] + map[bool]string{false: "/ReplicaAcksOff", true: "/ReplicaAcksOn"}[acks > 0]
			t.Run(name, func(t *testing.T) {
				var acquired, doubles, errs int
				for round := range rounds {
					// A subtest per failover, so each topology is stopped
					// before the next starts.
					t.Run("failover-"+strconv.Itoa(round+1), func(t *testing.T) {
						a, d, e := failoverRun(t, acks, linkLoss)
						acquired, doubles, errs = acquired+a, doubles+d, errs+e
					})
				}
				t.Logf("linkLoss=%v ReplicaAcks=%d, %d failover(s): %d acknowledged acquisitions, %d acquired again after failover, %d errors (503) during failover",
					linkLoss, acks, rounds, acquired, doubles, errs)
				// With acks on, every acquisition handed out had reached a
				// replica, and Sentinel promotes the replica with the
				// highest replication offset.
				if acks > 0 && doubles > 0 {
					t.Errorf("%d double acquisitions with ReplicaAcks=1", doubles)
				}
				// Without acks, the writes of the link-loss window are lost: if
				// none were, the fault did not happen and the test proves
				// nothing.
				if acks == 0 && linkLoss && doubles == 0 {
					t.Errorf("no acquisition was lost with ReplicaAcks=0 after replica lag; the fault did not take effect")
				}
			})
		}
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func failoverRun(t *testing.T, acks int, linkLoss bool) (acquired, doubles, errs int) {
	topo := redistopo.StartSentinel(t, 2, 3)
	// The client comes from the URL form the gateway's --store takes.
	client, err := redisstore.ParseURL("redis-sentinel://" + strings.Join(topo.SentinelAddrs(), ",") + "/" + redistopo.MasterName + "?pool_size=64")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	s, err := redisstore.New(client, &redisstore.Options{Prefix: "idemtest:failover:", ReplicaAcks: acks, ReplicaAckTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var (
		mu         sync.Mutex
		held       []idem.ID // acquisitions the store acknowledged
		nErr, nOK  atomic.Int64
		stop       = make(chan struct{})
		wg         sync.WaitGroup
		workers    = 8
		acquireOne = func() {
			id := idem.ID{Tenant: "fo", Key: rand.Text()}
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			res, err := s.Acquire(ctx, idem.AcquireParams{ID: id, Owner: "first", Fingerprint: "fp", Lease: time.Minute})
			if err != nil {
				nErr.Add(1)
				time.Sleep(10 * time.Millisecond)
				return
			}
			if !res.Acquired {
				t.Errorf("a fresh key %v was not acquired: %+v", id, res.Record)
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
	time.Sleep(300 * time.Millisecond)
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
		time.Sleep(300 * time.Millisecond)
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
	for _, id := range held {
		res, err := s.Acquire(ctx, idem.AcquireParams{ID: id, Owner: "second", Fingerprint: "fp", Lease: time.Minute})
		if err != nil {
			t.Fatalf("acquire after failover: %v", err)
		}
		if res.Acquired {
			doubles++
		} else if res.Record.Owner != "first" {
			t.Errorf("key %v is held by %q after failover, want the first owner", id, res.Record.Owner)
		}
	}
	return len(held), doubles, int(nErr.Load())
}
