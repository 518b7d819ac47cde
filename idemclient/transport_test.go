package idemclient_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/store/memstore"
)

// readsThenCloses is an upstream that reads each request and answers it,
// except a request whose key starts with "drop-": it closes the
// connection without answering it, and may have acted on it.
type readsThenCloses struct {
	ln    net.Listener
	mu    sync.Mutex
	got   map[string]int // requests read, by Idempotency-Key
	conns sync.WaitGroup
}

func newReadsThenCloses(t *testing.T) *readsThenCloses {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &readsThenCloses{ln: ln, got: map[string]int{}}
	u.conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Go(func() { u.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); u.conns.Wait() })
	return u
}

func (u *readsThenCloses) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		key := req.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.got[key]++
		u.mu.Unlock()
		if strings.HasPrefix(key, "drop-") {
			return // read, maybe acted on, never answered
		}
		io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
	}
}

func (u *readsThenCloses) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got[key]
}

func keyed(t *testing.T, ctx context.Context, url, key string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil) // no body: what http.Transport would resend
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(idemclient.HeaderKey, key)
	return req
}

// TestTransportSaysWhetherARequestWasSent (issue 32 item 9): what the
// gateway learned from httptrace, every caller can ask with Sent: a
// refused dial sent nothing (the work may release its key); a request the
// server read and never answered was sent (its outcome is unknown), and
// is not resent behind the caller's back; a request whose lease ended is
// not sent at all; a transport that tells nothing counts as sent.
func TestTransportSaysWhetherARequestWasSent(t *testing.T) {
	ctx := context.Background()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr := &idemclient.Transport{Base: base}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String()
	closed.Close()
	_, err = tr.RoundTrip(keyed(t, ctx, refused, "refused"))
	if err == nil || idemclient.Sent(err) {
		t.Fatalf("refused dial: err %v, Sent %t; want an error that says nothing was sent", err, idemclient.Sent(err))
	}

	up := newReadsThenCloses(t)
	url := "http://" + up.ln.Addr().String()
	resp, err := tr.RoundTrip(keyed(t, ctx, url, "first"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) // the connection goes back to the pool, to be reused
	resp.Body.Close()
	// On the kept-alive connection (when the pool has it back), where
	// http.Transport would resend it; on a new one, it would not: either
	// way the server reads it once.
	_, err = tr.RoundTrip(keyed(t, ctx, url, "drop-second"))
	if err == nil || !idemclient.Sent(err) {
		t.Fatalf("read and not answered: err %v, Sent %t; want an error that says it was sent", err, idemclient.Sent(err))
	}
	if n := up.count("drop-second"); n != 1 {
		t.Fatalf("the server read the request %d times; want 1 (net/http resent it)", n)
	}

	// Under a lease that has ended, nothing goes out.
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := idem.New(s, &idem.Options{LeaseDuration: 50 * time.Millisecond, RenewEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = e.Do(ctx, idem.Request{Key: "late", NoFingerprint: true}, func(ctx context.Context, l *idem.Lease) ([]byte, error) {
		<-ctx.Done() // a pause outlives the lease
		_, err := tr.RoundTrip(keyed(t, ctx, url, "late"))
		if err == nil || idemclient.Sent(err) || !errors.Is(err, idem.ErrLeaseExpired) {
			t.Errorf("under an ended lease: err %v, Sent %t; want ErrLeaseExpired, not sent", err, idemclient.Sent(err))
		}
		return nil, idem.NotRun(err)
	})
	if !idem.Retryable(err) || up.count("late") != 0 {
		t.Fatalf("Do = %v, the server read %d; want the key released and nothing sent", err, up.count("late"))
	}

	// A transport that does not report what it wrote: every failure counts as sent.
	opaque := &idemclient.Transport{Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, errors.New("opaque failure")
	})}
	if _, err := opaque.RoundTrip(keyed(t, ctx, refused, "opaque")); !idemclient.Sent(err) {
		t.Fatalf("an opaque transport's failure: Sent false; want true, never a release on a guess")
	}
	if !idemclient.Sent(errors.New("a body cut mid-read")) {
		t.Fatal("Sent of an error no Transport made = false; want true")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestSentAfterRetries: Retrying over Transport whose first attempt was
// read by the server (the connection closed without an answer) and whose
// last never left (the server is gone: the dial is refused). The request
// may have run, so Sent must say so: it used to read the last attempt
// only and say false, and a caller that releases a key on !Sent (the
// documented pattern) let a retry run it again.
func TestSentAfterRetries(t *testing.T) {
	var srv *recorder
	srv = newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		srv.Listener.Close() // the next attempt's dial is refused
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	})
	c, _ := newRetrying(t, &idemclient.Transport{Base: transport(t)}, idemclient.RetryOptions{MaxAttempts: 2})
	resp, err := post(t, c, context.Background(), srv.URL, "x")
	if err == nil {
		resp.Body.Close()
		t.Fatal("no error")
	}
	if n := len(srv.seen()); n != 1 {
		t.Fatalf("server read %d requests; want 1", n)
	}
	if !errors.Is(err, idemclient.ErrOutcomeUnknown) || !idemclient.Sent(err) {
		t.Fatalf("Sent(%v) = false; want true: the first attempt reached the server", err)
	}
}
