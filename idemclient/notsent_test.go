package idemclient_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/store/memstore"
)

// refusedURL returns the URL of a loopback port that nothing listens on.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	return url
}

func memEngine(t *testing.T, o *idem.Options) *idem.Engine {
	t.Helper()
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := idem.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// When no attempt was sent (every dial refused), the request provably did
// not run: Retrying returns the last error as Transport made it, not sent,
// and a work whose one call it was says idem.NotRun, so that Engine.Do
// releases the key. It used to say "outcome unknown" after more than one
// attempt, and the key stayed UNKNOWN until an operator resolved it.
func TestRetryingNeverSentIsNotUnknown(t *testing.T) {
	url := refusedURL(t)
	c, s := newRetrying(t, &idemclient.Transport{Base: transport(t)}, idemclient.RetryOptions{MaxAttempts: 3})
	e := memEngine(t, nil)
	var sendErr error
	_, _, err := e.Do(t.Context(), idem.Request{Tenant: "acme", Key: "order-1", NoFingerprint: true}, func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
		resp, err := post(t, c, idemclient.WithStep(ctx, "charge"), url, "x")
		if err == nil {
			resp.Body.Close()
			return nil, errors.New("a refused port answered")
		}
		sendErr = err
		if !idemclient.Sent(err) {
			return nil, idem.NotRun(err) // the work's one call never left
		}
		return nil, err
	})
	if n := len(s.recorded()); n != 2 {
		t.Fatalf("Retrying waited %d times; want 2 (3 attempts)", n)
	}
	if _, ok := errors.AsType[*idemclient.OutcomeUnknownError](sendErr); ok || errors.Is(sendErr, idem.ErrOutcomeUnknown) || idemclient.Sent(sendErr) {
		t.Fatalf("after 3 refused dials: %v (Sent %t); want the last error, not sent, not an unknown outcome", sendErr, idemclient.Sent(sendErr))
	}
	if errors.Is(err, idem.ErrOutcomeUnknown) || !idem.Retryable(err) {
		t.Fatalf("Do = %v; want the key released (the error marked NotRun), not UNKNOWN", err)
	}
}

// An attempt that got any response reached a server, which may have run
// the request (a proxy's 503 or 502 after its upstream did): a later
// attempt that never left does not make the outcome known.
func TestRetryingAnsweredThenNotSentIsUnknown(t *testing.T) {
	var srv *recorder
	srv = newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		srv.Listener.Close() // the next attempt's dial is refused
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	c, _ := newRetrying(t, &idemclient.Transport{Base: transport(t)}, idemclient.RetryOptions{MaxAttempts: 2})
	resp, err := post(t, c, context.Background(), srv.URL, "x")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %d; want an error: the second dial is refused", resp.StatusCode)
	}
	keys := srv.seen()
	unknown, ok := errors.AsType[*idemclient.OutcomeUnknownError](err)
	if len(keys) != 1 || !ok || unknown.Key != keys[0] || unknown.Attempts != 2 || !idemclient.Sent(err) {
		t.Fatalf("503 then a refused dial: %v (server saw %q); want an *OutcomeUnknownError with the key sent, 2 attempts", err, keys)
	}
}

// Under a lease that has ended, Transport refuses to send, and every
// resend would be refused too: Retrying stops after the first attempt and
// returns the lease's error, not sent.
func TestRetryingStopsWhenTheLeaseEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := memEngine(t, &idem.Options{LeaseDuration: 50 * time.Millisecond, RenewEvery: -1})
		var attempts atomic.Int32
		tr := &idemclient.Transport{Base: roundTripFunc(func(*http.Request) (*http.Response, error) {
			return nil, errors.New("sent under an ended lease")
		})}
		counted := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			attempts.Add(1)
			return tr.RoundTrip(r)
		})
		c, _ := newRetrying(t, counted, idemclient.RetryOptions{MaxAttempts: 3})
		var sendErr error
		_, _, err := e.Do(t.Context(), idem.Request{Tenant: "acme", Key: "late", NoFingerprint: true}, func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
			<-ctx.Done() // a pause outlives the lease
			// A call the work lets finish whatever its context: only the
			// lease, which the context still carries, stops the retries.
			resp, err := post(t, c, idemclient.WithStep(context.WithoutCancel(ctx), "charge"), "http://provider.invalid", "x")
			if err == nil {
				resp.Body.Close()
				return nil, errors.New("sent under an ended lease")
			}
			sendErr = err
			if !idemclient.Sent(err) {
				return nil, idem.NotRun(err)
			}
			return nil, err
		})
		if n := attempts.Load(); n != 1 {
			t.Fatalf("Retrying made %d attempts under an ended lease; want 1", n)
		}
		if !errors.Is(sendErr, idem.ErrLeaseExpired) || idemclient.Sent(sendErr) || errors.Is(sendErr, idem.ErrOutcomeUnknown) {
			t.Fatalf("under an ended lease: %v (Sent %t); want ErrLeaseExpired, not sent", sendErr, idemclient.Sent(sendErr))
		}
		if !idem.Retryable(err) {
			t.Fatalf("Do = %v; want the key released", err)
		}
	})
}

// A POST that ran and answered 303, whose redirect's dial is refused: the
// redirect's request never left, but the POST reached the server, and the
// key must not be released (it was, and a second Do ran the POST again).
// So with Transport alone and under Retrying.
func TestRedirectedThenRefusedIsUnknown(t *testing.T) {
	away := refusedURL(t)
	var posts atomic.Int32
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
		}
		http.Redirect(w, r, away+"/charges/1", http.StatusSeeOther)
	})
	retrying, _ := newRetrying(t, &idemclient.Transport{Base: transport(t)}, idemclient.RetryOptions{MaxAttempts: 3})
	for name, c := range map[string]*http.Client{
		"Transport": {Transport: &idemclient.Transport{Base: transport(t)}},
		"Retrying":  retrying,
	} {
		t.Run(name, func(t *testing.T) {
			posts.Store(0)
			e := memEngine(t, nil)
			for range 2 {
				_, _, err := e.Do(t.Context(), idem.Request{Tenant: "acme", Key: "order-1", NoFingerprint: true}, func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
					resp, err := post(t, c, idemclient.WithStep(ctx, "charge"), srv.URL, "x")
					if err == nil {
						resp.Body.Close()
						return nil, errors.New("a refused port answered")
					}
					if !idemclient.Sent(err) {
						t.Errorf("after a redirect, Sent(%v) = false; want true: the POST reached the server", err)
					}
					return nil, err
				})
				if err == nil || idem.Retryable(err) {
					t.Fatalf("Do = %v; want the key kept (the POST ran), not released", err)
				}
			}
			if n := posts.Load(); n != 1 {
				t.Fatalf("the POST ran %d times; want 1", n)
			}
		})
	}
}

// Retrying that stops before a retry (its wait cut by the context's end)
// after attempts that all provably never left: the request did not run,
// and the error says so (not sent), as when the attempts run out; it used
// to claim a possible send, and the key stayed UNKNOWN.
func TestRetryingStoppedBeforeAnySendIsNotRun(t *testing.T) {
	url := refusedURL(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c, _ := newRetrying(t, &idemclient.Transport{Base: transport(t)}, idemclient.RetryOptions{MaxAttempts: 3,
		Sleep: func(context.Context, time.Duration) error { cancel(); return context.Canceled }})
	e := memEngine(t, nil)
	var sendErr error
	_, _, err := e.Do(t.Context(), idem.Request{Tenant: "acme", Key: "order-1", NoFingerprint: true}, func(_ context.Context, l *idem.Lease) ([]byte, error) {
		resp, err := post(t, c, idemclient.WithStep(idemclient.WithScope(ctx, "acme", "order-1"), "charge"), url, "x")
		if err == nil {
			resp.Body.Close()
			return nil, errors.New("a refused port answered")
		}
		sendErr = err
		if !idemclient.Sent(err) {
			return nil, idem.NotRun(err)
		}
		return nil, err
	})
	if idemclient.Sent(sendErr) || errors.Is(sendErr, idem.ErrOutcomeUnknown) || !errors.Is(sendErr, context.Canceled) {
		t.Fatalf("stopped after a refused dial: %v (Sent %t); want the context's error, not sent, not an unknown outcome", sendErr, idemclient.Sent(sendErr))
	}
	if !idem.Retryable(err) {
		t.Fatalf("Do = %v; want the key released (NotRun)", err)
	}
}

// A work that charged through Transport, then failed on a second call
// that never left and wrapped its error: the charge ran, so the key must
// stay UNKNOWN. Transport used to mark every not-sent error idem.NotRun,
// which the wrap carried to Do: the key was released, and the next Do
// charged again.
func TestNotSentAfterAnEffectKeepsTheKey(t *testing.T) {
	var charges atomic.Int32
	provider := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		charges.Add(1)
		w.WriteHeader(http.StatusCreated)
	})
	notifier := refusedURL(t)
	c := &http.Client{Transport: &idemclient.Transport{Base: transport(t)}}
	e := memEngine(t, nil)
	for range 2 {
		_, _, err := e.Do(t.Context(), idem.Request{Tenant: "acme", Key: "order-1", NoFingerprint: true}, func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
			resp, err := post(t, c, idemclient.WithStep(ctx, "charge"), provider.URL, "x")
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			if _, err := post(t, c, idemclient.WithStep(ctx, "notify"), notifier, "x"); err != nil {
				return nil, fmt.Errorf("notify: %w", err)
			}
			return nil, errors.New("a refused port answered")
		})
		if err == nil || idem.Retryable(err) {
			t.Fatalf("Do = %v; want the key kept UNKNOWN (the charge ran)", err)
		}
	}
	if n := charges.Load(); n != 1 {
		t.Fatalf("charged %d times; want 1", n)
	}
}

// An attempt read and cut off (its outcome unknown), then an error answer
// that is not a replay: a 401 of an expired token, a firewall's 403, a
// load balancer's 404 say nothing of the first attempt, which may have
// run. Retrying keeps the unknown outcome, with the key it made; it used
// to return the 4xx, and the caller's next try under a new key could run
// the request twice. The server's own answer, replayed, settles it.
func TestRetryingKeepsTheUnknownAfterAnAnswerFromInFront(t *testing.T) {
	for _, c := range []struct {
		status   int
		replayed bool
	}{{401, false}, {403, false}, {404, false}, {400, false}, {302, false}, {422, true}, {201, false}} {
		var calls atomic.Int32
		srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close() // read, then cut: the outcome is unknown
				return
			}
			if c.replayed {
				w.Header().Set(idemclient.HeaderReplayed, "true")
			}
			if c.status == 302 {
				w.Header().Set("Location", "https://sso.example/login") // never followed: the unknown outcome comes first
			}
			w.WriteHeader(c.status)
		})
		cl, _ := newRetrying(t, &idemclient.Transport{Base: transport(t)}, idemclient.RetryOptions{MaxAttempts: 2})
		resp, err := post(t, cl, t.Context(), srv.URL, "x")
		ue, unknown := errors.AsType[*idemclient.OutcomeUnknownError](err)
		switch settled := c.status < 300 || c.replayed; {
		case settled && (err != nil || resp.StatusCode != c.status):
			t.Errorf("%d (replayed %t) after a cut attempt: %v; want the answer", c.status, c.replayed, err)
		case !settled && (!unknown || ue.Key == "" || ue.Key != srv.seen()[0]):
			t.Errorf("%d after a cut attempt: %v, %v; want an *OutcomeUnknownError with the key sent", c.status, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
}

// Over HTTP/2 a request whose context ends once it has a connection may
// still be written: the transport returns without waiting for the
// goroutine that writes it. A request whose context ended once it had a
// connection counts as sent (the server may run it); it used to count as
// not sent when the hooks had not yet seen the write.
func TestHTTP2CancelledOnItsConnectionCountsAsSent(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers: the call ends on its context alone
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	base := srv.Client().Transport.(*http.Transport)
	base.ForceAttemptHTTP2 = true
	c := &http.Client{Transport: &idemclient.Transport{Base: base}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var gotConn atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		gotConn.Store(true)
		if tc, ok := info.Conn.(*tls.Conn); !ok || tc.ConnectionState().NegotiatedProtocol != "h2" {
			t.Errorf("the connection is not HTTP/2: the test shows nothing")
		}
		cancel()
	}})
	resp, err := post(t, c, ctx, srv.URL, "x")
	if err == nil {
		resp.Body.Close()
		t.Fatal("a server that never answers answered")
	}
	if !gotConn.Load() {
		t.Fatalf("no connection was had (%v): the test shows nothing", err)
	}
	if !idemclient.Sent(err) {
		t.Fatalf("cancelled on its HTTP/2 connection: Sent(%v) = false; want true", err)
	}
}

// When Retrying's attempts run out on a 500, the caller gets the response,
// and the key it was sent with (one Retrying made) in resp.Request: a 5xx
// may follow the effect, and a retry must go under that key. Transport
// sends the key under its lower-case name, and resp.Request was that
// copy, where Header.Get found nothing.
func TestResponseRequestHoldsTheKey(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	c, _ := newRetrying(t, &idemclient.Transport{Base: transport(t)}, idemclient.RetryOptions{MaxAttempts: 2})
	resp, err := post(t, c, t.Context(), srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, sent := resp.Request.Header.Get(idemclient.HeaderKey), srv.seen(); resp.StatusCode != 500 || got == "" || got != sent[len(sent)-1] {
		t.Fatalf("after the attempts ran out: %d, resp.Request's key %q; want 500 and the key sent, %q", resp.StatusCode, got, sent)
	}
}
