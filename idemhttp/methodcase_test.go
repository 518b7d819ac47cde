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

// TestHeadIsProtectedWithGet: ServeMux, Rails, Express, Spring and Django
// run a GET handler for a HEAD, so Methods with GET protect HEAD too (a
// keyed HEAD sent twice ran the export twice; one without a key passed
// RequireKey). A HEAD is fingerprinted as a HEAD: one reusing a GET's key
// is a mismatch, never a run nor a replay of the GET's body.
func TestHeadIsProtectedWithGet(t *testing.T) {
	for _, methods := range [][]string{{"GET"}, {"get", "POST"}} {
		t.Run(strings.Join(methods, ","), func(t *testing.T) {
			var runs atomic.Int64
			mux := http.NewServeMux()
			mux.HandleFunc("GET /export", func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1) // the export, whichever of GET or HEAD asked
				w.Write([]byte("exported"))
			})
			srv := serve(t, newMiddleware(t, newEngine(t, newMemStore(t), nil), &idemhttp.Options{Methods: methods, RequireKey: true})(mux))
			head := call{method: http.MethodHead, path: "/export", key: "h2"}
			head.send(t, srv)
			if second := head.send(t, srv); second.status != http.StatusOK || second.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Errorf("a keyed HEAD's retry = %d (replayed %q); want 200 replayed", second.status, second.header.Get(idemhttp.HeaderReplayed))
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("two keyed HEADs ran the handler %d times; want 1", n)
			}
			if got := (call{method: http.MethodHead, path: "/export"}).send(t, srv); got.status != http.StatusBadRequest {
				t.Errorf("a HEAD without a key = %d; want 400 (key_required)", got.status)
			}
			call{method: http.MethodGet, path: "/export", key: "h1"}.send(t, srv)
			if got := (call{method: http.MethodHead, path: "/export", key: "h1"}).send(t, srv); got.status != http.StatusUnprocessableEntity {
				t.Errorf("a HEAD with a GET's key = %d; want 422 (key_mismatch)", got.status)
			}
			if n := runs.Load(); n != 2 {
				t.Fatalf("the handler ran %d times; want 2 (the keyed HEAD and the GET)", n)
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
