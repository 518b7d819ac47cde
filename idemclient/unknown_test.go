package idemclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
)

const unknownProblem = `{"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#outcome_unknown","status":503,"code":"outcome_unknown"}`

// unknownThen answers outcome_unknown (Retry-After 2) to the first n
// requests, then 201 "charged".
func unknownThen(t *testing.T, n int32) (*recorder, *atomic.Int32) {
	var calls atomic.Int32
	return newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= n {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, unknownProblem)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	}), &calls
}

// TestOutcomeUnknownRetriedThenTyped: an outcome_unknown answer is retried
// with the same key, after its Retry-After; when the attempts run out on
// it, the error says the outcome is unknown (ErrOutcomeUnknown), with the
// key to come back with, and is not a response that reads as a failure.
func TestOutcomeUnknownRetriedThenTyped(t *testing.T) {
	srv, calls := unknownThen(t, 100)
	c, s := newRetrying(t, transport(t), idemclient.RetryOptions{MaxAttempts: 3})
	resp, err := post(t, c, context.Background(), srv.URL, `{}`)
	if resp != nil {
		resp.Body.Close()
	}
	var ue *idemclient.OutcomeUnknownError
	if !errors.As(err, &ue) || !errors.Is(err, idemclient.ErrOutcomeUnknown) {
		t.Fatalf("err %v; want an *OutcomeUnknownError", err)
	}
	keys := srv.seen()
	if calls.Load() != 3 || ue.Attempts != 3 || ue.Status != 503 || ue.Code != "outcome_unknown" || ue.Key == "" || ue.Key != keys[0] || keys[2] != keys[0] {
		t.Fatalf("%d calls, error %+v, keys %q; want 3 attempts with one key", calls.Load(), ue, keys)
	}
	if w := s.recorded(); len(w) != 2 || w[0] != 2*time.Second {
		t.Errorf("waits %v; want the Retry-After of 2s twice", w)
	}
	if strings.Contains(err.Error(), "fail") {
		t.Errorf("error %q speaks of failure", err)
	}
}

// TestOutcomeUnknownWithoutRetryAfterNotRetried (issue 32 item 7): a
// server without a reconciliation answers an UNKNOWN key with no
// Retry-After (idemhttp's default), since nothing settles it but an
// operator. Retrying used to wait and resend until its 30 s budget ran
// out; it returns the *OutcomeUnknownError at once, which matches
// idem.ErrOutcomeUnknown (issue 32 item 6).
func TestOutcomeUnknownWithoutRetryAfterNotRetried(t *testing.T) {
	var calls atomic.Int32
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, unknownProblem)
	})
	c, s := newRetrying(t, transport(t), idemclient.RetryOptions{})
	resp, err := post(t, c, context.Background(), srv.URL, `{}`)
	if resp != nil {
		resp.Body.Close()
	}
	ue, ok := errors.AsType[*idemclient.OutcomeUnknownError](err)
	if !ok || !errors.Is(err, idem.ErrOutcomeUnknown) || ue.Attempts != 1 {
		t.Fatalf("err %v; want an *OutcomeUnknownError after 1 attempt, matching idem.ErrOutcomeUnknown", err)
	}
	if calls.Load() != 1 || len(s.recorded()) != 0 {
		t.Fatalf("%d calls, waits %v; want 1 call and no wait", calls.Load(), s.recorded())
	}
}

// TestOutcomeUnknownResolvedByRetry: when a retry finds the result, it is
// returned as any response.
func TestOutcomeUnknownResolvedByRetry(t *testing.T) {
	srv, _ := unknownThen(t, 2)
	c, _ := newRetrying(t, transport(t), idemclient.RetryOptions{})
	resp, err := post(t, c, context.Background(), srv.URL, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != 201 || body != "charged" {
		t.Fatalf("%d %q; want the 201", resp.StatusCode, body)
	}
}

// TestOtherProblemsReturnedAsTheyAre: a 503 problem with another code
// is returned, body intact, when the attempts run out.
func TestOtherProblemsReturnedAsTheyAre(t *testing.T) {
	body := `{"code":"store_unavailable"}`
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, body)
	})
	c, _ := newRetrying(t, transport(t), idemclient.RetryOptions{MaxAttempts: 2})
	resp, err := post(t, c, context.Background(), srv.URL, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != 503 || got != body {
		t.Fatalf("%d %q; want the problem as it was", resp.StatusCode, got)
	}
}

// TestCancelKeepsTheKeyOfAnUnknownOutcome: a caller that cancels while
// the first attempt's answer is awaited (the server has the request), or
// while Retrying waits to resend an outcome_unknown answer, must still get
// the key Retrying made: without it, the only way to go on is a new key,
// which runs the request a second time. It used to get a bare context
// error (with MaxAttempts 1 it got the key: only the retry path lost it).
func TestCancelKeepsTheKeyOfAnUnknownOutcome(t *testing.T) {
	t.Run("answer awaited", func(t *testing.T) {
		received := make(chan struct{}, 1)
		release := make(chan struct{})
		defer close(release)
		srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
			received <- struct{}{}
			<-release
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-received
			cancel()
		}()
		c, _ := newRetrying(t, transport(t), idemclient.RetryOptions{})
		resp, err := post(t, c, ctx, srv.URL, `{}`)
		if resp != nil {
			resp.Body.Close()
		}
		ue, ok := errors.AsType[*idemclient.OutcomeUnknownError](err)
		if keys := srv.seen(); !ok || len(keys) != 1 || ue.Key != keys[0] || !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, keys sent %q; want an *OutcomeUnknownError with the key sent, matching context.Canceled", err, keys)
		}
	})
	t.Run("waiting to retry", func(t *testing.T) {
		srv, calls := unknownThen(t, 100)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := &sleeper{hook: cancel}
		c, _ := newRetrying(t, transport(t), idemclient.RetryOptions{Sleep: s.Sleep})
		resp, err := post(t, c, ctx, srv.URL, `{}`)
		if resp != nil {
			resp.Body.Close()
		}
		ue, ok := errors.AsType[*idemclient.OutcomeUnknownError](err)
		if keys := srv.seen(); !ok || calls.Load() != 1 || ue.Key != keys[0] || ue.Code != "outcome_unknown" || !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v after %d calls; want an *OutcomeUnknownError with the key sent and code outcome_unknown, matching context.Canceled", err, calls.Load())
		}
	})
}

// An attempt read by the server and answered with nothing leaves the
// outcome unknown; the retries after it are answered 409 key_in_flight
// (the first attempt is running there). However RoundTrip then ends (the
// attempts run out, or the caller's context ends while it waits), the
// caller gets the key: it used to get the 409, or the bare context error,
// and its only way on was a new key, which runs the request twice.
func TestLaterAnswersKeepAnEarlierUnknownOutcome(t *testing.T) {
	for _, c := range []struct {
		name   string
		cancel bool
	}{{"attempts run out", false}, {"wait cancelled", true}} {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					conn, _, err := http.NewResponseController(w).Hijack()
					if err != nil {
						t.Error(err)
						return
					}
					conn.Close()
					return
				}
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusConflict)
				io.WriteString(w, `{"status":409,"code":"key_in_flight"}`)
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := &sleeper{}
			if c.cancel {
				var waits atomic.Int32
				s.hook = func() { // the wait after the first 409
					if waits.Add(1) == 2 {
						cancel()
					}
				}
			}
			cl, _ := newRetrying(t, &idemclient.Transport{Base: transport(t)}, idemclient.RetryOptions{MaxAttempts: 3, Sleep: s.Sleep})
			resp, err := post(t, cl, ctx, srv.URL, `{}`)
			if resp != nil {
				resp.Body.Close()
			}
			ue, ok := errors.AsType[*idemclient.OutcomeUnknownError](err)
			keys := srv.seen()
			if !ok || len(keys) < 2 || ue.Key != keys[0] {
				t.Fatalf("err %v (response %v), keys sent %q; want an *OutcomeUnknownError with the key sent", err, resp != nil, keys)
			}
			if c.cancel && !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v; want it to match context.Canceled too", err)
			}
		})
	}
}
