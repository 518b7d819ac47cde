package idemhttp_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// A full memory store refuses new keys with 503 store_full, FailOpen or
// not (running unprotected would risk a double execution for a store that
// is up), and keeps replaying every key it holds.
func TestStoreFullRefusesNewKeysAndReplaysStoredOnes(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailOpen=%v", failOpen), func(t *testing.T) {
			store, err := memstore.New(&memstore.Options{MaxBytes: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			var got outcomes
			mw := newMiddleware(t, newEngine(t, store, nil), &idemhttp.Options{FailOpen: failOpen, OnOutcome: got.record})
			srv := serve(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := calls.Add(1)
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "call %d %s", n, strings.Repeat(".", 4<<10))
			})))
			var stored []string
			for i := 0; ; i++ {
				key := fmt.Sprintf("k%d", i)
				r := call{key: key}.send(t, srv)
				if r.status == http.StatusServiceUnavailable {
					checkProblem(t, r, http.StatusServiceUnavailable, idemhttp.CodeStoreFull)
					if r.header.Get("Retry-After") == "" {
						t.Error("store_full without Retry-After")
					}
					break
				}
				if r.status != http.StatusCreated {
					t.Fatalf("key %s: %d %s", key, r.status, r.body)
				}
				stored = append(stored, key)
				if i > 100 {
					t.Fatal("a 64 KiB store took 100 results of 4 KiB")
				}
			}
			executed := calls.Load()
			if int(executed) != len(stored) {
				t.Fatalf("%d executions for %d stored keys: the refused key ran", executed, len(stored))
			}
			for i, key := range stored {
				r := call{key: key}.send(t, srv)
				if r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "true" ||
					!strings.HasPrefix(string(r.body), fmt.Sprintf("call %d ", i+1)) {
					t.Fatalf("replay of %s from a full store: %d replayed=%q %.20s", key, r.status, r.header.Get(idemhttp.HeaderReplayed), r.body)
				}
			}
			if calls.Load() != executed {
				t.Fatalf("replays from a full store ran the handler %d more times", calls.Load()-executed)
			}
			if got.count(idemhttp.OutcomeStoreFull) != 1 || got.count(idemhttp.OutcomeFailedOpen) != 0 {
				t.Fatalf("outcomes %v; want one store_full and no failed_open", got.list)
			}
		})
	}
}

func TestTenantMissingIsItsOwnProblem(t *testing.T) {
	mw := newMiddleware(t, newEngine(t, mustMemStore(t), nil), &idemhttp.Options{
		Tenant: func(r *http.Request) (string, error) {
			if c, err := r.Cookie("session"); err == nil {
				return c.Value, nil
			}
			return "", idemhttp.ErrTenantMissing
		},
	})
	srv := serve(t, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })))
	checkProblem(t, call{key: "k"}.send(t, srv), http.StatusBadRequest, idemhttp.CodeTenantMissing)
	if r := (call{key: "k", header: map[string]string{"Cookie": "session=alice"}}).send(t, srv); r.status != http.StatusCreated {
		t.Fatalf("request with a tenant: %d %s", r.status, r.body)
	}
}

func mustMemStore(t *testing.T) *memstore.Store {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
