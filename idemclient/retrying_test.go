package idemclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemclient"
)

// sleeper is the injected Sleep: it records every wait instead of waiting.
type sleeper struct {
	mu    sync.Mutex
	waits []time.Duration
	hook  func() // called on each wait, before it returns
}

func (s *sleeper) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	hook := s.hook
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	return ctx.Err()
}

func (s *sleeper) recorded() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// scripted answers the n-th request (from 0) with statuses[n], or 200 once
// the script is over, and records each request's key and body.
type scripted struct {
	*recorder
	bodies []string
	calls  atomic.Int32
}

func newScripted(t *testing.T, statuses []int, header http.Header) *scripted {
	t.Helper()
	s := &scripted{}
	var mu sync.Mutex
	s.recorder = newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		s.bodies = append(s.bodies, string(b))
		mu.Unlock()
		n := int(s.calls.Add(1)) - 1
		code := http.StatusOK
		if n < len(statuses) {
			code = statuses[n]
		}
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(code)
		io.WriteString(w, "answer "+strconv.Itoa(n))
	})
	return s
}

func newRetrying(t *testing.T, base http.RoundTripper, opts idemclient.RetryOptions) (*http.Client, *sleeper) {
	t.Helper()
	s := &sleeper{}
	if opts.Sleep == nil {
		opts.Sleep = s.Sleep
	}
	rt, err := idemclient.NewRetrying(base, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: rt}, s
}

func post(t *testing.T, c *http.Client, ctx context.Context, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return c.Do(req)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRetryingResendsSameKeyAndBody(t *testing.T) {
	srv := newScripted(t, []int{503, 503}, nil)
	c, s := newRetrying(t, transport(t), idemclient.RetryOptions{})
	resp, err := post(t, c, context.Background(), srv.URL, `{"amount":100}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != 200 || got != "answer 2" {
		t.Fatalf("got %d %q; want 200 from the third attempt", resp.StatusCode, got)
	}
	keys := srv.seen()
	if len(keys) != 3 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Fatalf("server saw keys %q; want one generated key three times", keys)
	}
	if len(keys[0]) < 26 { // rand.Text: 26 base32 characters, 130 bits
		t.Errorf("generated key %q is shorter than 128 bits of base32", keys[0])
	}
	for i, b := range srv.bodies {
		if b != `{"amount":100}` {
			t.Errorf("attempt %d sent body %q; want the original", i+1, b)
		}
	}
	if n := len(s.recorded()); n != 2 {
		t.Errorf("waited %d times; want 2", n)
	}
}

func TestRetryingGeneratesDistinctKeysPerCall(t *testing.T) {
	srv := newScripted(t, nil, nil)
	c, _ := newRetrying(t, transport(t), idemclient.RetryOptions{})
	for range 2 {
		resp, err := post(t, c, context.Background(), srv.URL, "x")
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	if keys := srv.seen(); len(keys) != 2 || keys[0] == keys[1] {
		t.Fatalf("two calls sent keys %q; want two different keys", keys)
	}
}

func TestRetryingNeverRetriesClientErrors(t *testing.T) {
	for _, code := range []int{400, 401, 403, 404, 422, 501} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			srv := newScripted(t, []int{code}, nil)
			c, s := newRetrying(t, transport(t), idemclient.RetryOptions{})
			resp, err := post(t, c, context.Background(), srv.URL, "x")
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); resp.StatusCode != code || got != "answer 0" {
				t.Fatalf("got %d %q; want the first answer, %d", resp.StatusCode, got, code)
			}
			if n := srv.calls.Load(); n != 1 {
				t.Fatalf("server saw %d requests; want 1", n)
			}
			if len(s.recorded()) != 0 {
				t.Fatal("Retrying waited for a retry it must not make")
			}
		})
	}
}

func TestRetryingHonoursRetryAfterSeconds(t *testing.T) {
	for _, code := range []int{409, 429, 503} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			srv := newScripted(t, []int{code}, http.Header{"Retry-After": {"3"}})
			c, s := newRetrying(t, transport(t), idemclient.RetryOptions{})
			resp, err := post(t, c, context.Background(), srv.URL, "x")
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if got := s.recorded(); len(got) != 1 || got[0] != 3*time.Second {
				t.Fatalf("waits %v; want [3s] from Retry-After", got)
			}
			if keys := srv.seen(); len(keys) != 2 || keys[0] != keys[1] {
				t.Fatalf("keys %q; want the same key twice", keys)
			}
		})
	}
}

func TestRetryingHonoursRetryAfterDateAndCap(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	date := now.Add(7 * time.Second).Format(http.TimeFormat)
	srv := newScripted(t, []int{409}, http.Header{"Retry-After": {date}})
	c, s := newRetrying(t, transport(t), idemclient.RetryOptions{Now: func() time.Time { return now }})
	resp, err := post(t, c, context.Background(), srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if got := s.recorded(); len(got) != 1 || got[0] != 7*time.Second {
		t.Fatalf("waits %v; want [7s] from the Retry-After date", got)
	}

	srv = newScripted(t, []int{409}, http.Header{"Retry-After": {"3600"}})
	c, s = newRetrying(t, transport(t), idemclient.RetryOptions{MaxDelay: 2 * time.Second})
	resp, err = post(t, c, context.Background(), srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if got := s.recorded(); len(got) != 1 || got[0] != 2*time.Second {
		t.Fatalf("waits %v; want [2s]: Retry-After capped at MaxDelay", got)
	}
}

func TestRetryingBackoffIsCappedAndJittered(t *testing.T) {
	srv := newScripted(t, []int{500, 502, 503, 504, 500, 502, 503}, nil)
	c, s := newRetrying(t, transport(t), idemclient.RetryOptions{
		MaxAttempts: 8, BaseDelay: time.Second, MaxDelay: 4 * time.Second, MaxWait: time.Hour,
	})
	resp, err := post(t, c, context.Background(), srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != 200 {
		t.Fatalf("status %d; want 200 on the eighth attempt", resp.StatusCode)
	}
	ceilings := []time.Duration{1, 2, 4, 4, 4, 4, 4}
	waits := s.recorded()
	if len(waits) != len(ceilings) {
		t.Fatalf("waits %v; want %d", waits, len(ceilings))
	}
	for i, w := range waits {
		if w < 0 || w > ceilings[i]*time.Second {
			t.Errorf("wait %d = %v; want within [0, %v]", i+1, w, ceilings[i]*time.Second)
		}
	}
}

func TestRetryingStopsAtMaxAttemptsAndMaxWait(t *testing.T) {
	srv := newScripted(t, []int{503, 503, 503, 503, 503, 503}, nil)
	c, _ := newRetrying(t, transport(t), idemclient.RetryOptions{MaxAttempts: 3})
	resp, err := post(t, c, context.Background(), srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != 503 || got != "answer 2" {
		t.Fatalf("got %d %q; want the third answer, 503, returned as it is", resp.StatusCode, got)
	}
	if n := srv.calls.Load(); n != 3 {
		t.Fatalf("server saw %d requests; want MaxAttempts = 3", n)
	}

	srv = newScripted(t, []int{503, 503, 503}, http.Header{"Retry-After": {"4"}})
	c, s := newRetrying(t, transport(t), idemclient.RetryOptions{MaxWait: 10 * time.Second})
	resp, err = post(t, c, context.Background(), srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if n := srv.calls.Load(); n != 3 || len(s.recorded()) != 2 {
		t.Fatalf("server saw %d requests after waits %v; want 3: a third 4s wait exceeds MaxWait 10s", n, s.recorded())
	}
}

// closer is a loopback server that drops the connection without an answer
// for its first drops requests, then answers 200.
func closer(t *testing.T, drops int32) *recorder {
	var n atomic.Int32
	return newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) > drops {
			io.WriteString(w, "ok")
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	})
}

func TestRetryingRetriesNetworkErrors(t *testing.T) {
	srv := closer(t, 2)
	c, _ := newRetrying(t, transport(t), idemclient.RetryOptions{})
	resp, err := post(t, c, context.Background(), srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "ok" {
		t.Fatalf("body %q; want ok", got)
	}
	if keys := srv.seen(); len(keys) != 3 || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Fatalf("keys %q; want the same key on all three attempts", keys)
	}

	srv = closer(t, 100)
	c, _ = newRetrying(t, transport(t), idemclient.RetryOptions{MaxAttempts: 2})
	resp, err = post(t, c, context.Background(), srv.URL, "x")
	if err == nil {
		resp.Body.Close()
		t.Fatal("no error after every attempt failed")
	}
	keys := srv.seen()
	if len(keys) != 2 {
		t.Fatalf("server saw %d requests; want 2", len(keys))
	}
	// The key it made is the caller's to send again with: a new one may
	// run the request twice.
	unknown, ok := errors.AsType[*idemclient.OutcomeUnknownError](err)
	if !ok || unknown.Key != keys[0] || unknown.Err == nil || unknown.Attempts != 2 || !errors.Is(err, idemclient.ErrOutcomeUnknown) {
		t.Fatalf("error after every attempt failed = %v; want an *OutcomeUnknownError with the key %q sent, the last error and 2 attempts", err, keys[0])
	}
}

func TestRetryingRefusesToResendUnreplayableBody(t *testing.T) {
	srv := newScripted(t, []int{503}, nil)
	c, _ := newRetrying(t, transport(t), idemclient.RetryOptions{})
	req, _ := http.NewRequest(http.MethodPost, srv.URL, io.NopCloser(strings.NewReader("payload")))
	if req.GetBody != nil {
		t.Fatal("test needs a request without GetBody")
	}
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, idemclient.ErrBodyNotReplayable) {
		t.Fatalf("error %v; want ErrBodyNotReplayable", err)
	}
	if n := srv.calls.Load(); n != 1 || srv.bodies[0] != "payload" {
		t.Fatalf("server saw %d requests, bodies %q; want only the first, never an empty resend", n, srv.bodies)
	}
}

func TestRetryingStopsOnCancel(t *testing.T) {
	srv := newScripted(t, []int{503, 503, 503}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &sleeper{hook: cancel} // cancelled during the first wait
	c, _ := newRetrying(t, transport(t), idemclient.RetryOptions{Sleep: s.Sleep})
	resp, err := post(t, c, ctx, srv.URL, "x")
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v; want context.Canceled", err)
	}
	if n := srv.calls.Load(); n != 1 {
		t.Fatalf("server saw %d requests; want 1, none after the cancel", n)
	}
}

func TestRetryingKeepsCallerKeyAndMethodRules(t *testing.T) {
	srv := newScripted(t, []int{503, 200, 503, 200}, nil)
	c, _ := newRetrying(t, transport(t), idemclient.RetryOptions{})
	send := func(method, key string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL, nil)
		if key != "" {
			req.Header.Set(idemclient.HeaderKey, key)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
	}
	send(http.MethodPost, "mine") // 503, then 200: same key kept
	send(http.MethodGet, "")      // 503, then 200: GET is idempotent, sent without a key
	send("LOCK", "")              // 200 at once; a 503 would not have been retried
	want := []string{"mine", "mine", "", "", ""}
	if got := srv.seen(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("keys %q; want %q", got, want)
	}

	srv = newScripted(t, []int{503}, nil)
	c, _ = newRetrying(t, transport(t), idemclient.RetryOptions{})
	req, _ := http.NewRequest("LOCK", srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != 503 || srv.calls.Load() != 1 {
		t.Fatalf("LOCK without key: status %d after %d requests; want one 503", resp.StatusCode, srv.calls.Load())
	}
}

func TestNewRetryingRejectsNegativeOptions(t *testing.T) {
	for _, o := range []idemclient.RetryOptions{{MaxAttempts: -1}, {BaseDelay: -1}, {MaxDelay: -1}, {MaxWait: -1}} {
		if _, err := idemclient.NewRetrying(nil, &o); !errors.Is(err, idemclient.ErrInvalidOptions) {
			t.Errorf("NewRetrying(%+v) error %v; want ErrInvalidOptions", o, err)
		}
	}
	if _, err := idemclient.NewRetrying(nil, nil); err != nil {
		t.Errorf("NewRetrying(nil, nil): %v", err)
	}
}

// TestPropagatorOverRetrying checks the documented composition: the derived
// key is set first, and Retrying resends it unchanged.
func TestPropagatorOverRetrying(t *testing.T) {
	srv := newScripted(t, []int{503}, nil)
	s := &sleeper{}
	rt, err := idemclient.NewRetrying(transport(t), &idemclient.RetryOptions{Sleep: s.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &idemclient.Propagator{Base: rt}}
	ctx := idemclient.WithStep(idemclient.WithScope(context.Background(), "acme", "order-42"), "charge")
	resp, err := post(t, c, ctx, srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	want := idemclient.StepKey("acme", "order-42", "charge")
	if keys := srv.seen(); len(keys) != 2 || keys[0] != want || keys[1] != want {
		t.Fatalf("keys %q; want the derived key twice", keys)
	}
}

// closeTracker wraps a transport and records whether each response body it
// hands out was read to the end and closed.
type closeTracker struct {
	base   http.RoundTripper
	mu     sync.Mutex
	bodies []*trackedBody
}

type trackedBody struct {
	io.ReadCloser
	eof, closed atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (b *trackedBody) Close() error { b.closed.Store(true); return b.ReadCloser.Close() }

func (c *closeTracker) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err == nil {
		tb := &trackedBody{ReadCloser: resp.Body}
		resp.Body = tb
		c.mu.Lock()
		c.bodies = append(c.bodies, tb)
		c.mu.Unlock()
	}
	return resp, err
}

func TestRetryingDrainsAndClosesDiscardedResponses(t *testing.T) {
	srv := newScripted(t, []int{503, 409}, nil)
	tracker := &closeTracker{base: transport(t)}
	c, _ := newRetrying(t, tracker, idemclient.RetryOptions{})
	resp, err := post(t, c, context.Background(), srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if len(tracker.bodies) != 3 {
		t.Fatalf("%d responses; want 3", len(tracker.bodies))
	}
	for i, b := range tracker.bodies[:2] {
		if !b.eof.Load() || !b.closed.Load() {
			t.Errorf("discarded response %d: drained %v, closed %v; want both", i+1, b.eof.Load(), b.closed.Load())
		}
	}
	if tracker.bodies[2].closed.Load() {
		t.Error("the returned response was closed before the caller read it")
	}
}
