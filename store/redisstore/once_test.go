package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/faultproxy"
	"github.com/idemkit/idem/internal/testinfra/redistopo"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
)

// TestLostReplyNotResent: the reply to a Release that ran is lost with its
// connection. go-redis used to send the script again, whose second run
// found the key released and answered ErrLeaseLost for a release that had
// succeeded (found by internal/check). The store now answers with the
// connection's error, and the engine's own retry completes the release.
func TestLostReplyNotResent(t *testing.T) {
	node := redistopo.StartNode(t)
	proxy, err := faultproxy.New(node.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	s, err := redisstore.OpenURL("redis://"+proxy.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	acquire := func(key string) store.LeaseRef {
		t.Helper()
		res, err := s.Acquire(ctx, store.AcquireParams{ID: store.ID{Tenant: "t", Key: key}, Owner: "o-" + key, Fingerprint: "fp",
			LeaseDuration: time.Minute, Retention: time.Hour})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire(%s) = %+v, %v", key, res, err)
		}
		return store.LeaseRef{ID: res.Record.ID, Owner: "o-" + key, Fence: res.Record.Fence}
	}
	if err := s.Release(ctx, acquire("warm")); err != nil { // loads the script: a NOSCRIPT reply is not the one to drop
		t.Fatal(err)
	}
	ref := acquire("k")
	proxy.DropReplyOnce(func([]byte) bool { return true })
	err = s.Release(ctx, ref)
	if proxy.Dropped() != 1 {
		t.Fatal("no reply was dropped: the fault did not bite")
	}
	if err == nil || errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Release whose reply was lost = %v; want the connection's error (the release ran once, its outcome unknown)", err)
	}
	if _, err := s.Get(ctx, ref.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after the release: Get = %v, want ErrNotFound", err)
	}

	engine, err := idem.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	att, err := engine.Begin(ctx, idem.Request{Tenant: "t", Key: "via-engine", Fingerprint: "fp"})
	if err != nil || att.Outcome != idem.Acquired {
		t.Fatalf("Begin = %+v, %v", att, err)
	}
	proxy.DropReplyOnce(func([]byte) bool { return true })
	if err := att.Lease.Release(ctx); err != nil {
		t.Fatalf("Lease.Release whose first reply was lost = %v; want nil (the engine's retry finds it released)", err)
	}
}
