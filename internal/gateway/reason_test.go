package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// TestUnknownReasonHoldsNoUpstreamAddress (issue 32 item 4): the upstream
// reads a request and resets the connection. The key turns UNKNOWN, and
// its reason, kept in the store and shown to every client that retries
// the key, used to end with the transport's error text, which names the
// upstream's internal address. It names the class of the failure only.
func TestUnknownReasonHoldsNoUpstreamAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					io.Copy(io.Discard, req.Body)
				}
				c.(*net.TCPConn).SetLinger(0) // a reset, after the request was read
				c.Close()
			})
		}
	})
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	u, _ := url.Parse("http://" + ln.Addr().String())
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGateway(t, Config{Upstream: u, Store: s})
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	send := func() (int, string) {
		status, body, _ := sendTo(t, srv, "k")
		return status, body
	}
	if status, body := send(); status != http.StatusBadGateway || strings.Contains(body, port) {
		t.Fatalf("first request: %d %s; want 502 upstream_no_response without the upstream's address", status, body)
	}
	status, body := send()
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "outcome_unknown") || strings.Contains(body, port) {
		t.Fatalf("retry: %d %s; want 503 outcome_unknown without the upstream's address", status, body)
	}
	page, err := g.Engine().ListUnknown(context.Background(), store.ListParams{AllTenants: true, Limit: 10})
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("ListUnknown = %+v, %v; want the one UNKNOWN key", page, err)
	}
	if r := page.Records[0].Reason; strings.Contains(r, port) || strings.Contains(r, "127.0.0.1") || r != "the request was sent upstream and no complete response came back" {
		t.Fatalf("stored reason %q; want the class of the failure, nothing of the transport's error", r)
	}

	// Issue 32 item 7: the first answer invites a retry only when a
	// reconciliation may settle the key: with a reconcile URL, at once.
	lookup := httptest.NewServer(http.NotFoundHandler())
	defer lookup.Close()
	rs, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	rg := newTestGateway(t, Config{Upstream: u, Store: rs, ReconcileURL: lookup.URL + "/lookup/{key}"})
	rsrv := httptest.NewServer(rg.Handler())
	defer rsrv.Close()
	if status, _, h := sendTo(t, rsrv, "r"); status != http.StatusBadGateway || h.Get("Retry-After") != "1" {
		t.Fatalf("with a reconcile URL: %d, Retry-After %q; want 502 with Retry-After 1", status, h.Get("Retry-After"))
	}
	if _, _, h := sendTo(t, srv, "k2"); h.Get("Retry-After") != "" {
		t.Fatalf("without a reconcile URL: Retry-After %q; want none", h.Get("Retry-After"))
	}
}

func sendTo(t *testing.T, srv *httptest.Server, key string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer c")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}
