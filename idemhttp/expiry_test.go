package idemhttp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// Every answer to a keyed request says how long responses and keys are
// kept; answers to unkeyed or unprotected requests do not.
func TestExpiryHeader(t *testing.T) {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, s, &idem.Options{Retention: 2 * time.Hour})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	srv := serve(t, newMiddleware(t, e, nil)(h))
	route := serve(t, newMiddleware(t, e, &idemhttp.Options{Retention: 90 * time.Second})(h))
	for _, tc := range []struct {
		name string
		srv  string
		c    call
		want string
	}{
		{"first", srv.URL, call{key: "k1", body: "a"}, "response=7200, key=7200"},
		{"replay", srv.URL, call{key: "k1", body: "a"}, "response=7200, key=7200"},
		{"mismatch", srv.URL, call{key: "k1", body: "b"}, "response=7200, key=7200"},
		{"route retention", route.URL, call{key: "k2"}, "response=90, key=90"},
		{"no key", srv.URL, call{}, ""},
		{"unprotected", srv.URL, call{method: http.MethodGet, key: "k3"}, ""},
	} {
		res, err := http.DefaultClient.Do(tc.c.request(t, tc.srv))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := res.Header.Values(idemhttp.HeaderExpiry); len(got) > 1 || res.Header.Get(idemhttp.HeaderExpiry) != tc.want {
			t.Errorf("%s: %s %q, want %q", tc.name, idemhttp.HeaderExpiry, got, tc.want)
		}
	}
}
