package idemhttp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// TestRetentionUnderAMillisecondIsRefused: stores keep durations in
// milliseconds and the engine refuses a request whose retention is under
// one, so New refuses such a Retention at once, as idemgrpc does, rather
// than answer every request 500 afterwards.
func TestRetentionUnderAMillisecondIsRefused(t *testing.T) {
	e := newEngine(t, newMemStore(t), nil)
	if _, err := idemhttp.New(e, &idemhttp.Options{Retention: 500 * time.Microsecond, AllowAnonymous: true}); err == nil {
		mw, _ := idemhttp.New(e, &idemhttp.Options{Retention: 500 * time.Microsecond, AllowAnonymous: true})
		got := call{key: "k"}.send(t, serve(t, mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))))
		t.Fatalf("New accepted a Retention of 500µs; a request then gets %d %s", got.status, got.body)
	}
}
