package idemclient_test

import (
	"context"
	"errors"
	"net"
	"net/http"
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
// not run: Retrying returns the last error as Transport made it, marked
// idem.NotRun and not sent, so that Engine.Do releases the key. It used to
// say "outcome unknown" after more than one attempt, and the key stayed
// UNKNOWN until an operator resolved it.
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
		return nil, err // as it is: NotRun only if Retrying kept Transport's mark
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
// returns the lease's error, not sent, marked NotRun.
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
// and the error says so (not sent, idem.NotRun), as when the attempts run
// out; it used to leave the key UNKNOWN.
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
		return nil, err
	})
	if idemclient.Sent(sendErr) || errors.Is(sendErr, idem.ErrOutcomeUnknown) || !errors.Is(sendErr, context.Canceled) {
		t.Fatalf("stopped after a refused dial: %v (Sent %t); want the context's error, not sent, not an unknown outcome", sendErr, idemclient.Sent(sendErr))
	}
	if !idem.Retryable(err) {
		t.Fatalf("Do = %v; want the key released (NotRun)", err)
	}
}
