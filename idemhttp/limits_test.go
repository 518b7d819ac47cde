package idemhttp_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
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

// TestAnonymousRequestsRefusedByDefault (issue 32 item 5): two clients
// without credentials sending the same key used to share the scope "" and
// get each other's responses. By default such a request is refused with
// 400 tenant_missing (an empty Authorization is no credential either, nor
// is a Tenant's ""), as idemgrpc and idem serve refuse it;
// AllowAnonymous shares one scope on purpose.
func TestAnonymousRequestsRefusedByDefault(t *testing.T) {
	var calls atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "call %d", calls.Add(1))
	})
	e := newEngine(t, mustMemStore(t), nil)
	mw, err := idemhttp.New(e, nil) // the defaults, not the test helper's
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, mw(h))
	checkProblem(t, call{key: "k"}.send(t, srv), http.StatusBadRequest, idemhttp.CodeTenantMissing)
	checkProblem(t, call{key: "k", header: map[string]string{"Authorization": ""}}.send(t, srv), http.StatusBadRequest, idemhttp.CodeTenantMissing)
	if calls.Load() != 0 {
		t.Fatalf("the handler ran %d times for anonymous requests; want 0", calls.Load())
	}
	if a, b := (call{key: "k", auth: "Bearer alice"}).send(t, srv), (call{key: "k", auth: "Bearer bob"}).send(t, srv); string(a.body) == string(b.body) {
		t.Fatalf("two clients with the same key got %q and %q; want one execution each", a.body, b.body)
	}
	empty, err := idemhttp.New(e, &idemhttp.Options{Tenant: func(*http.Request) (string, error) { return "", nil }})
	if err != nil {
		t.Fatal(err)
	}
	checkProblem(t, call{key: "k2", auth: "Bearer alice"}.send(t, serve(t, empty(h))), http.StatusBadRequest, idemhttp.CodeTenantMissing)

	shared, err := idemhttp.New(e, &idemhttp.Options{AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	open := serve(t, shared(h))
	first, second := call{key: "k3"}.send(t, open), call{key: "k3"}.send(t, open)
	if first.status != http.StatusOK || string(second.body) != string(first.body) || second.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("AllowAnonymous: %d %q then %d %q; want one shared scope, the second replayed", first.status, first.body, second.status, second.body)
	}
	if idemhttp.ErrTenantMissing != idem.ErrTenantMissing {
		t.Error("idemhttp.ErrTenantMissing is not idem.ErrTenantMissing")
	}
}

func mustMemStore(t *testing.T) *memstore.Store {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
