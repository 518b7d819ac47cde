package redisstore_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storetest"
)

func TestMain(m *testing.M) {
	// After a failed dial (a node the topology tests killed), go-redis keeps
	// one goroutine that sleeps a second before it sees the closed pool and
	// exits: not ours, and gone a second later.
	// A rueidis cluster client closes the connections of nodes it dropped
	// from its view five seconds later, in a goroutine that outlives Close.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

func TestConformance(t *testing.T) {
	client := testenv.Redis(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) (store.Store, func(time.Duration)) {
			s, err := redisstore.New(client, &redisstore.Options{Prefix: testenv.Prefix(t)})
			if err != nil {
				t.Fatal(err)
			}
			return s, storetest.Sleep // Redis keeps real time
		},
	})
}

func TestPrefixWithBraceRejected(t *testing.T) {
	if _, err := redisstore.New(testenv.Redis(t), &redisstore.Options{Prefix: "a{b"}); err == nil {
		t.Fatal("New accepted a prefix with a brace")
	}
}
