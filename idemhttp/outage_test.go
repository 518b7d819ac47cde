package idemhttp_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/store"
)

// The store fails right when the response is to be stored (the client
// already has it): the engine holds the response, a retry that reaches
// this process gets it replayed, not 409, and once the store is back
// every process replays it.
func TestResponseHeldThroughAStoreOutage(t *testing.T) {
	eachStoreInBubble(t, func(t *testing.T, store store.Store) {
		s := &storekit.Faulty{Store: store}
		e := newEngine(t, s, nil)
		runs := 0
		h := newMiddleware(t, e, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			s.FailNext(storekit.OpComplete, math.MaxInt) // the store goes away while the handler answers
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte("charged"))
		}))
		c := call{key: "order-1", body: `{"amount":5}`}
		send := func(h http.Handler) response {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, c.request(t, "http://idem.test"))
			return recorded(rec)
		}
		if r := send(h); r.status != http.StatusCreated || string(r.body) != "charged" {
			t.Fatalf("first request = %d %q", r.status, r.body)
		}
		if r := send(h); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "true" || string(r.body) != "charged" || runs != 1 {
			t.Fatalf("retry while the store fails = %d %q replayed=%q after %d runs; want the 201 replayed from the held response",
				r.status, r.body, r.header.Get(idemhttp.HeaderReplayed), runs)
		}
		s.FailNext(storekit.OpComplete, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		other := newMiddleware(t, newEngine(t, s, nil), nil)(http.NotFoundHandler()) // another process
		if r := send(other); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "true" || runs != 1 {
			t.Fatalf("retry at another process once the store is back = %d %q; want the 201 replayed", r.status, r.body)
		}
	})
}
