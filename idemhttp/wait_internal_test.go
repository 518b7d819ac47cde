package idemhttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// Waiting on keys that another process finishes leaves no wake-up
// channel behind: a multi-instance gateway in wait mode must not grow. It
// runs in a synctest bubble: each waiter polls the store on the bubble's
// clock, and synctest.Wait says when it is waiting.
func TestWaitersLeaveNothingBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, _ := memstore.New(nil)
		engine, _ := idem.New(st, nil)
		m, err := newMiddleware(engine, &Options{Wait: 2 * time.Second, AllowAnonymous: true})
		if err != nil {
			t.Fatal(err)
		}
		other, _ := idem.New(st, nil) // another gateway on the same store
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
		for i := range 20 {
			key := "held-elsewhere-" + string(rune('a'+i))
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
			req.Header.Set(HeaderKey, key)
			att, err := other.Begin(context.Background(), idem.Request{Key: key, Fingerprint: m.fingerprint(req, []byte("{}"))})
			if err != nil || att.Outcome != idem.Acquired {
				t.Fatalf("the other process could not take %s: %v %v", key, att.Outcome, err)
			}
			rec := httptest.NewRecorder()
			served := make(chan struct{})
			go func() {
				defer close(served)
				m.serve(handler, rec, req)
			}()
			synctest.Wait() // the request waits for the other process's key
			watched := m.finished.Len()
			if watched != 1 {
				t.Fatalf("%d wake-up entries while one request waits; want 1", watched)
			}
			att.Lease.Complete(context.Background(), store.Result{Status: http.StatusCreated})
			<-served
			if rec.Code != http.StatusCreated || rec.Header().Get(HeaderReplayed) != "true" {
				t.Fatalf("waiter for %s got %d; want the other process's 201 replayed", key, rec.Code)
			}
		}
		if n := m.finished.Len(); n != 0 {
			t.Fatalf("%d wake-up entries left after every wait ended; want 0", n)
		}
	})
}
