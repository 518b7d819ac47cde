package idemhttp_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// TestMethodInAnyCase: a request whose method differs only in case from a
// protected one ("post") is protected too, and so is a protected method
// listed in another case in Options.Methods: handlers and frameworks that
// read methods without case (Django, ASP.NET, strings.EqualFold) would
// otherwise run a keyed request twice, unprotected.
func TestMethodInAnyCase(t *testing.T) {
	for _, tc := range []struct {
		name    string
		methods []string // Options.Methods
		send    string
	}{
		{"request post, default methods", nil, "post"},
		{"request Patch, default methods", nil, "Patch"},
		{"request POST, methods [post]", []string{"post"}, "POST"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.EqualFold(r.Method, http.MethodPost) || strings.EqualFold(r.Method, http.MethodPatch) {
					runs.Add(1) // the charge
				}
				w.Write([]byte("charged"))
			})
			mw := newMiddleware(t, newEngine(t, newMemStore(t), nil), &idemhttp.Options{Methods: tc.methods})
			srv := serve(t, mw(h))
			c := call{method: tc.send, key: "k1", body: "{}"}
			c.send(t, srv)
			second := c.send(t, srv)
			if n := runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times for one key, want 1", n)
			}
			if second.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("the second request was not a replay: %d %s", second.status, second.body)
			}
		})
	}
}

func newMemStore(t *testing.T) store.Store {
	t.Helper()
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
