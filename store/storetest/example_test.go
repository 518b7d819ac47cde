package storetest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/storetest"
)

// fakeClock is one case's clock: only the store made with it reads it.
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

// A store's conformance test, in a _test.go file of its package: here the
// memory store, each case on a store and a fake clock of its own, so that
// the cases run in parallel and none sees another's keys expire early.
func Example() {
	conformance := func(t *testing.T) {
		storetest.Run(t, storetest.Harness{
			New: func(t *testing.T) (store.Store, func(time.Duration)) {
				clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
				s, err := memstore.New(&memstore.Options{Clock: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				return s, clock.Advance
			},
		})
	}
	_ = conformance // func TestConformance(t *testing.T) { conformance(t) }
}
