package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store/redisstore"
)

// pausedAnswerDeadline is how long the tests on a paused server wait for
// an answer before they call it a hang: a deadline on the test, not a
// timing assertion. It is far above the 2s store timeout (a loaded
// machine answers late), and far below the tens of seconds to minutes a
// call on a paused or cut-off store took without one.
const pausedAnswerDeadline = 8 * time.Second

// TestPausedRedisFailsClosed: a redis-server of the test's own is
// SIGSTOPped: it keeps its connections and its port and answers nothing,
// as behind a cut link. Begin on a new key answers ErrStore, with either
// client a store URL opens (go-redis, and rueidis with the near cache).
// The acquire sent during the pause sits in the socket and lands when the
// server resumes: the engine releases that orphan, and the retry runs.
func TestPausedRedisFailsClosed(t *testing.T) {
	srv, err := redisproc.Start(context.Background(), redisproc.Config{Dir: t.TempDir()})
	if err != nil {
		testenv.Unavailable(t, "a redis-server of this test's own", err)
	}
	defer srv.Kill()
	for name, query := range map[string]string{"go-redis": "", "near-cache": "?near_cache=on"} {
		t.Run(name, func(t *testing.T) {
			s, err := redisstore.OpenURL("redis://"+srv.Addr+"/0"+query, &redisstore.Options{Prefix: testenv.Prefix(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			e := newEngine(t, s, nil)
			ctx := context.Background()
			if _, _, err := e.Do(ctx, idem.Request{Key: "warm", NoFingerprint: true}, func(context.Context, *idem.Lease) ([]byte, error) { return nil, nil }); err != nil {
				t.Fatal(err) // the connections are open before the pause
			}
			req := idem.Request{Key: "during-the-pause", Fingerprint: "fp"}
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			answered := make(chan error, 1)
			go func() {
				a, err := e.Begin(ctx, req)
				if a.Lease != nil {
					a.Lease.Release(ctx)
				}
				answered <- err
			}()
			select {
			case err := <-answered:
				if !errors.Is(err, idem.ErrStore) {
					t.Errorf("Begin on a paused Redis = %v; want ErrStore", err)
				}
			case <-time.After(pausedAnswerDeadline):
				srv.Resume()
				t.Fatalf("Begin on a paused Redis: no answer after %v", pausedAnswerDeadline)
			}
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
			flushCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := idem.FlushHeld(e, flushCtx); err != nil {
				t.Fatal(err)
			}
			a := begin(t, e, req)
			if a.Outcome != idem.Acquired {
				t.Fatalf("retry after the pause = %v %+v; want Acquired: the acquire that landed on resume was released", a.Outcome, a.Record)
			}
			a.Lease.Release(ctx)
		})
	}
}
