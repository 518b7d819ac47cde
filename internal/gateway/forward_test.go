package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// upstreamRequest is what the upstream got of one forwarded request.
type upstreamRequest struct {
	path, query   string
	header        http.Header
	contentLength int64
	chunked       bool
	body          string
}

// forwardGateway serves a gateway in front of the upstream handler h,
// whose URL is joined to base (a path and query), until the test ends.
func forwardGateway(t *testing.T, base string, h http.HandlerFunc) (*Gateway, *httptest.Server) {
	t.Helper()
	up := httptest.NewServer(h)
	t.Cleanup(up.Close)
	g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL+base), AllowAnonymous: true})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	return g, srv
}

// The upstream gets the request without the hop-by-hop headers (those
// RFC 9110 §7.6.1 lists, and those Connection names), with the gateway's
// own X-Forwarded-* in place of the client's, at the upstream's base path
// joined with the request's, and its query after the upstream's, less a
// parameter Go cannot parse. No User-Agent is added for a client that
// sent none. A protected request's body, read to fingerprint it, goes on
// with its length known, though the client sent it chunked.
func TestForwardedRequest(t *testing.T) {
	got := make(chan upstreamRequest, 1)
	_, srv := forwardGateway(t, "/base?tag=gw", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- upstreamRequest{path: r.URL.Path, query: r.URL.RawQuery, header: r.Header.Clone(), contentLength: r.ContentLength,
			chunked: len(r.TransferEncoding) > 0, body: string(b)}
		w.WriteHeader(http.StatusCreated)
	})
	gatewayHost := strings.TrimPrefix(srv.URL, "http://")
	for _, key := range []string{"fwd-1", ""} { // protected, and passed through (no key)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges?a=1&b=2;c=3", io.MultiReader(strings.NewReader(`{"amount":1}`)))
		req.ContentLength = -1 // chunked
		for name, v := range map[string]string{"Connection": "X-Hop, keep-alive", "X-Hop": "1", "Keep-Alive": "timeout=5",
			"Proxy-Connection": "keep-alive", "Te": "trailers", "Forwarded": "for=6.6.6.6", "X-Forwarded-For": "6.6.6.6",
			"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https", "X-Kept": "yes", "User-Agent": ""} {
			req.Header.Set(name, v)
		}
		if key != "" {
			req.Header.Set(idemhttp.HeaderKey, key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("key %q: %d", key, resp.StatusCode)
		}
		u := <-got
		if u.path != "/base/v1/charges" || u.query != "tag=gw&a=1" || u.body != `{"amount":1}` {
			t.Errorf("key %q: the upstream got %s?%s %q; want /base/v1/charges?tag=gw&a=1 and the body", key, u.path, u.query, u.body)
		}
		for _, name := range []string{"Connection", "X-Hop", "Keep-Alive", "Proxy-Connection", "Forwarded", "User-Agent"} {
			if vs, ok := u.header[name]; ok {
				t.Errorf("key %q: the upstream got %s: %q; want none", key, name, vs)
			}
		}
		for name, want := range map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Host": gatewayHost,
			"X-Forwarded-Proto": "http", "Te": "trailers", "X-Kept": "yes"} {
			if vs := u.header.Values(name); len(vs) != 1 || vs[0] != want {
				t.Errorf("key %q: the upstream got %s: %q; want %q", key, name, vs, want)
			}
		}
		if key != "" && (u.chunked || u.contentLength != int64(len(`{"amount":1}`))) {
			t.Errorf("protected: the upstream got the body chunked %v, Content-Length %d; want its length known", u.chunked, u.contentLength)
		}
	}
}

// The upstream's informational answers (103 Early Hints) reach the client
// before the final one, and the final answer keeps the header the
// middleware set before forwarding (Idempotency-Expiry): a 1xx carries
// the upstream's own header only.
func TestForwardPassesInformationalAnswers(t *testing.T) {
	_, srv := forwardGateway(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.WriteHeader(http.StatusCreated)
	})
	var mu sync.Mutex
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		mu.Lock()
		defer mu.Unlock()
		hints = append(hints, fmt.Sprintf("%d %s", code, h.Get("Link")))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, srv.URL+"/charges", strings.NewReader("{}"))
	req.Header.Set(idemhttp.HeaderKey, "hints-1")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != http.StatusCreated || len(hints) != 1 || hints[0] != "103 </style.css>; rel=preload" {
		t.Fatalf("%d after 1xx %q; want 201 after 103 with the Link", resp.StatusCode, hints)
	}
	if resp.Header.Get(idemhttp.HeaderExpiry) == "" || resp.Header.Get("Link") != "" {
		t.Errorf("the final answer's header %v; want the middleware's %s and not the 103's Link", resp.Header, idemhttp.HeaderExpiry)
	}
}
