package gateway

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
)

// Issue 31, item 2: a panic after the request went upstream (here, in the
// transport, once the upstream had answered) turns the key UNKNOWN and
// ends its lease, so its renewal stops: before, a panic past the
// handler left the key PROCESSING with its lease renewed for the life of
// the process, and every retry got 409. The retry is not sent again.
func TestPanicAfterTheUpstreamRanLeavesTheKeyUnknown(t *testing.T) {
	up := newRouteUpstream(t)
	u, _ := url.Parse(up.URL)
	leases := make(chan *idem.Lease, 1)
	transport := NewUpstreamTransport()
	defer transport.CloseIdleConnections()
	g := newTestGateway(t, Config{Upstream: u, AllowAnonymous: true, Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := transport.RoundTrip(r)
		if err == nil {
			resp.Body.Close()
		}
		l, _ := idem.LeaseFromContext(r.Context())
		leases <- l
		panic("a bug after the upstream answered")
	}), Routes: []Route{{Pattern: "POST /v1/refunds", Statuses: StatusOverrides{Unknown: []string{"409"}}}}})
	srv := httptest.NewUnstartedServer(g.Handler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // net/http logs the panic it recovers
	srv.Start()
	defer srv.Close()
	c := &routeClient{t: t, up: up, g: g, srv: srv, key: "panic-"}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/refunds", strings.NewReader("{}"))
	req.Header.Set(idemhttp.HeaderKey, c.key+"k")
	req.Header.Set("Content-Type", "application/json") // as c.send sends it
	if resp, err := srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the request whose handler panicked = %d; want the connection cut (the panic goes on)", resp.StatusCode)
	}
	l := <-leases
	if err := l.Context().Err(); err == nil || errors.Is(context.Cause(l.Context()), idem.ErrLeaseExpired) {
		t.Errorf("the lease after the panic: %v; want it ended by MarkUnknown (renewal stopped)", err)
	}
	if rec := c.record("k"); rec.State != store.StateUnknown {
		t.Fatalf("the key after the panic is %v; want UNKNOWN", rec.State)
	}
	if got := c.send("POST", "/v1/refunds", "k", "{}"); got.status != http.StatusServiceUnavailable || got.code != idemhttp.CodeOutcomeUnknown {
		t.Fatalf("the retry = %d %s; want 503 outcome_unknown", got.status, got.body)
	}
	if n := c.runs("k"); n != 1 {
		t.Fatalf("the upstream ran it %d times; want once", n)
	}
}
