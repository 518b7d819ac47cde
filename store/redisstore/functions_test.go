package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storetest"
)

// TestConformanceFunctions: the conformance suite, unchanged, against the
// store that runs its scripts as a Redis function library (FCALL).
func TestConformanceFunctions(t *testing.T) {
	client := rueidisClient(t)
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) (store.Store, func(time.Duration)) {
			s, err := redisstore.NewRueidis(client, &redisstore.Options{Prefix: testenv.Prefix(t), Functions: true})
			if err != nil {
				t.Fatal(err)
			}
			return s, storetest.Sleep // Redis keeps real time
		},
	})
}

// TestFunctionsReloadAfterDelete: a server without the library (a new
// server, a restart without persistence, FUNCTION DELETE) gets it loaded
// again by the next call, which succeeds.
func TestFunctionsReloadAfterDelete(t *testing.T) {
	ctx := context.Background()
	c := rueidisClient(t)
	s, err := redisstore.NewRueidis(c, &redisstore.Options{Prefix: testenv.Prefix(t), Functions: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, key := range []string{"first", "after-delete"} {
		if i > 0 {
			if err := c.Do(ctx, c.B().FunctionDelete().LibraryName(redisstore.FunctionLibrary).Build()).Error(); err != nil {
				t.Fatalf("FUNCTION DELETE: %v", err)
			}
		}
		res, err := s.Acquire(ctx, store.AcquireParams{ID: store.ID{Tenant: "t", Key: key}, Owner: "o", LeaseDuration: time.Minute})
		if err != nil || !res.Acquired {
			t.Fatalf("Acquire %s = %+v, %v; want acquired", key, res, err)
		}
	}
	libs, err := c.Do(ctx, c.B().FunctionList().Libraryname(redisstore.FunctionLibrary).Build()).ToArray()
	if err != nil || len(libs) != 1 {
		t.Fatalf("FUNCTION LIST %s = %d libraries, %v; want the library loaded", redisstore.FunctionLibrary, len(libs), err)
	}
	if _, err := redisstore.New(testenv.Redis(t), &redisstore.Options{Functions: true}); err == nil || !strings.Contains(err.Error(), "rueidis") {
		t.Errorf("New with Functions = %v; want a refusal that names the client to use", err)
	}
}
