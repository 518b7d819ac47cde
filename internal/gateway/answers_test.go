package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// lines returns the JSON log lines whose msg begins with prefix.
func (s *syncBuffer) lines(t *testing.T, prefix string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.buf.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			t.Fatalf("log line %q is not JSON", line)
		}
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// Issue 31, item 13: the gateway's own 502 and 504 are not the request's
// answer: they say "not yet" (the key released, or UNKNOWN), so they
// carry no Repeatability-Result (they carried "accepted"); and their
// warning names the key and its tenant (it named neither).
func TestGatewaysOwnAnswersNameTheKeyAndAreNotAccepted(t *testing.T) {
	failing := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == "/hang" {
			<-r.Context().Done()
			return nil, context.Cause(r.Context())
		}
		return nil, io.ErrUnexpectedEOF // sent, and cut: the outcome is unknown
	})
	unreachable := NewUpstreamTransport()
	defer unreachable.CloseIdleConnections()
	for _, c := range []struct {
		path      string
		transport http.RoundTripper
		status    int
		code, log string
	}{
		{"/reset", failing, http.StatusBadGateway, CodeUpstreamNoResponse, "idem: upstream outcome unknown"},
		{"/hang", failing, http.StatusGatewayTimeout, CodeUpstreamTimeout, "idem: upstream outcome unknown"},
		{"/down", unreachable, http.StatusBadGateway, CodeUpstreamUnreachable, "idem: upstream unreachable"},
	} {
		var logs syncBuffer
		g := newTestGateway(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Transport: c.transport, Repeatability: true,
			UpstreamTimeout: 20 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		req := httptest.NewRequest(http.MethodPost, c.path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set(idemhttp.HeaderRepeatabilityID, "rr-1")
		req.Header.Set(idemhttp.HeaderRepeatabilityFirstSent, time.Now().UTC().Format(http.TimeFormat))
		rec := httptest.NewRecorder()
		g.Handler().ServeHTTP(rec, req)
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.code) {
			t.Fatalf("%s: %d %s; want %d %s", c.path, rec.Code, rec.Body, c.status, c.code)
		}
		if got := rec.Header().Values(idemhttp.HeaderRepeatabilityResult); len(got) != 0 {
			t.Errorf("%s: the gateway's own %d carries Repeatability-Result %q; want none (it is not the request's answer)", c.path, c.status, got)
		}
		lines := logs.lines(t, c.log)
		if len(lines) != 1 || lines[0]["key"] != "rr-1" || lines[0]["tenant"] != defaultTenant(t, req) || lines[0]["fence"] == nil {
			t.Errorf("%s: log lines %v; want one %q naming the key, its tenant and fence", c.path, lines, c.log)
		}
	}
}

// runGateway serves g on a loopback port until the test ends and returns
// the proxy's address.
func runGateway(t *testing.T, g *Gateway) string {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	ended := make(chan struct{}) // closed when Run has returned runErr: the cleanup waits for it even after the select saw it
	var runErr error
	go func() {
		defer close(ended)
		runErr = g.Run(ctx, func(proxy, _ net.Addr) { addr <- proxy.String() })
	}()
	t.Cleanup(func() { stop(); <-ended })
	select {
	case a := <-addr:
		return a
	case <-ended:
		t.Fatalf("Run: %v", runErr)
		return ""
	}
}

// Issue 31, item 13: a 1.1 MB header block got a reset, not 431. net/http
// answers 431 and closes the connection with the rest of the block
// unread, which resets it, and a client still sending (a slow link) lost
// the 431 it had not read yet. The gateway's connection now ends its
// answer (a half close: the client reads the 431 and then EOF, not a
// reset, even before it has sent the rest) and drains the rest before the
// close.
func TestOversizedHeaderBlockGets431(t *testing.T) {
	g := newTestGateway(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Listen: "127.0.0.1:0"})
	conn, err := net.Dial("tcp", runGateway(t, g))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second)) // a bound, not a wait: every step below ends sooner
	head := "POST /v1/charges HTTP/1.1\r\nHost: api.test\r\nX-Big: " + strings.Repeat("a", 1100<<10) + "\r\n\r\n"
	cut := http.DefaultMaxHeaderBytes + 64<<10 // past the limit, and well short of the end
	if _, err := io.WriteString(conn, head[:cut]); err != nil {
		t.Fatal(err)
	}
	answer, err := io.ReadAll(conn) // up to the gateway's end of the answer
	if err != nil || !strings.HasPrefix(string(answer), "HTTP/1.1 431 ") {
		t.Fatalf("the answer to a %d-byte header block: %q, %v; want a 431 and its end (EOF), not a reset", len(head), answer, err)
	}
	if _, err := io.WriteString(conn, head[cut:]); err != nil { // the slow client's rest
		t.Fatalf("sending the rest of the block after the 431: %v; want it drained", err)
	}
}
