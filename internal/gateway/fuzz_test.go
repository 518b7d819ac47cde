package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/store/memstore"
)

// FuzzGatewayRequest sends a request built from the fuzzer's method,
// Idempotency-Key, tenant credentials (Authorization, a trusted header, a
// cookie), body and body framing (Content-Length, chunked, both, neither)
// through the gateway twice, as a client and its retry would. The gateway
// must never panic, and never let a protected request with a key reach
// the upstream twice: the upstream answers 201, which is stored, so the
// retry is a replay, a conflict or a refusal.
func FuzzGatewayRequest(f *testing.F) {
	f.Add("POST", "k1", "Bearer a", "", "", []byte(`{"a":1}`), uint8(0))
	f.Add("PATCH", `"quoted"`, "", "acme", "", []byte("x"), uint8(1))
	f.Add("POST", "k2", "", "", "s1", []byte(""), uint8(2))
	f.Add("POST", "k3", "Bearer a", "", "", []byte("0\r\n\r\n"), uint8(3))
	f.Add("GET", "k4", "Bearer b", "t", "c", []byte("body"), uint8(0))
	f.Add("POST", "a,b", "x", "", "", []byte{0xff, 0}, uint8(1))
	f.Add("POST", "", "", "", "", []byte(nil), uint8(0))
	f.Fuzz(func(t *testing.T, method, key, auth, tenant, cookie string, body []byte, framing uint8) {
		raw := rawRequest(method, key, auth, tenant, cookie, body, framing)
		if raw == nil {
			return
		}
		up := &countingUpstream{calls: map[string]int{}}
		store, _ := memstore.New(nil)
		u, _ := url.Parse("http://upstream.test")
		g, err := New(Config{Upstream: u, Store: store, Transport: up, Logger: slog.New(slog.DiscardHandler),
			TenantFrom: []string{"authorization", "header:X-Tenant", "cookie:session"}})
		if err != nil {
			t.Fatal(err)
		}
		h := closeAfterChunked(g.Handler())
		for range 2 {
			// net/http's server parses requests with this same reader:
			// what it refuses never reaches a handler.
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
			if err != nil {
				return
			}
			req.RemoteAddr = "192.0.2.1:1234"
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code < 100 || rec.Code > 599 {
				t.Fatalf("status %d", rec.Code)
			}
			if len(req.TransferEncoding) > 0 && rec.Header().Get("Connection") != "close" {
				t.Fatalf("chunked request answered without Connection: close")
			}
		}
		for k, n := range up.snapshot() {
			if n > 1 && (method == "POST" || method == "PATCH") && k != "" {
				t.Fatalf("a %s with Idempotency-Key %q reached the upstream %d times", method, k, n)
			}
		}
	})
}

// rawRequest builds the bytes of an HTTP/1.1 request, or nil when the
// fuzzer's strings cannot be a request line or header values at all.
func rawRequest(method, key, auth, tenant, cookie string, body []byte, framing uint8) []byte {
	for _, s := range []string{method, key, auth, tenant, cookie} {
		if strings.ContainsAny(s, "\r\n") {
			return nil
		}
	}
	if method == "" || strings.ContainsAny(method, " \t") {
		return nil
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s /pay HTTP/1.1\r\nHost: gw.test\r\n", method)
	for _, h := range [][2]string{{"Idempotency-Key", key}, {"Authorization", auth}, {"X-Tenant", tenant}, {"Cookie", "session=" + cookie}} {
		if h[1] != "" && h[1] != "session=" {
			fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
		}
	}
	switch framing % 4 {
	case 0:
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
		b.Write(body)
	case 1, 2:
		if framing%4 == 2 {
			fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body)+7)
		}
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		if len(body) > 0 {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(body), body)
		}
		b.WriteString("0\r\n\r\n")
	default:
		b.WriteString("\r\n")
		b.Write(body) // no framing: the body is the next request's bytes, never this one's
	}
	return b.Bytes()
}

// countingUpstream is the upstream as a RoundTripper: it reads the
// request and counts it by Idempotency-Key (the gateway's transport may
// have renamed the header to lower case, see idemclient.Transport).
type countingUpstream struct {
	mu    sync.Mutex
	calls map[string]int
}

func (u *countingUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	key := r.Header.Get("Idempotency-Key")
	//lint:ignore SA1008 a non-canonical spelling that reached the upstream is a key too: count it
	if vs := r.Header["idempotency-key"]; len(vs) > 0 {
		key = vs[0]
	}
	u.mu.Lock()
	u.calls[key]++
	u.mu.Unlock()
	return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"text/plain"}},
		Body: io.NopCloser(strings.NewReader("created")), ContentLength: 7, Request: r, ProtoMajor: 1, ProtoMinor: 1}, nil
}

func (u *countingUpstream) snapshot() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]int, len(u.calls))
	for k, v := range u.calls {
		out[k] = v
	}
	return out
}
