package idemhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// Issue 36, item 4: Options.Label names each request in its key's record
// (what an operator sees of an UNKNOWN key), cut to store.MaxLabelLength;
// without it a record has no label.
func TestLabelReachesTheRecord(t *testing.T) {
	for _, c := range []struct {
		label func(*http.Request) string
		want  string
	}{
		{nil, ""},
		{func(r *http.Request) string { return r.Method + " " + r.URL.Path }, "POST /v1/orders"},
		{func(*http.Request) string { return strings.Repeat("é", 150) }, strings.Repeat("é", store.MaxLabelLength/2)},
	} {
		s, _ := memstore.New(nil)
		e := newEngine(t, s, nil)
		h := newMiddleware(t, e, &idemhttp.Options{Label: c.label})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
		}))
		req := httptest.NewRequest(http.MethodPost, "/v1/orders?secret=1", strings.NewReader("{}"))
		req.Header.Set(idemhttp.HeaderKey, "k")
		h.ServeHTTP(httptest.NewRecorder(), req)
		rec, err := e.Get(context.Background(), store.ID{Key: "k"})
		if err != nil || rec.State != store.StateCompleted || rec.Label != c.want {
			t.Fatalf("the record = %+v, %v; want COMPLETED with label %q", rec, err, c.want)
		}
	}
}
