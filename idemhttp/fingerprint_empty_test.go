package idemhttp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// A Fingerprint function that returns "" would make every request with a
// key match every other: the request is answered 500 as a problem, and
// the handler does not run.
func TestEmptyFingerprintIsAServerError(t *testing.T) {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	mw := newMiddleware(t, newEngine(t, s, nil), &idemhttp.Options{
		Fingerprint: func(*http.Request, []byte) string { return "" },
	})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ }))
	req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(`{}`))
	req.Header.Set(idemhttp.HeaderKey, "k1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("Content-Type") != "application/problem+json" || ran != 0 {
		t.Fatalf("empty fingerprint: status %d, type %q, handler ran %d times; want 500 problem+json and no run",
			rec.Code, rec.Header().Get("Content-Type"), ran)
	}
	var p struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Code != idemhttp.CodeInternal {
		t.Fatalf("problem = %s (%v); want code %q", rec.Body, err, idemhttp.CodeInternal)
	}
}
