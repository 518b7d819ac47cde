package idem_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
)

// The services of these tests are built the way README.md's quick start
// builds them: a consumer whose handle() runs its charge with Do and
// decides from the error what to do with the message, and a payment
// service behind idemhttp's middleware with its defaults.

type readmeMessage struct{ ID, Body string }

// readmeHandle is the README's handle(), with the charge passed in.
func readmeHandle(ctx context.Context, engine *idem.Engine, msg readmeMessage, charge func(ctx context.Context, body string, fence int64) ([]byte, error)) string {
	digest := sha256.Sum256([]byte(msg.Body))
	key := idem.Request{Tenant: "billing", Key: msg.ID, Fingerprint: hex.EncodeToString(digest[:])}
	out, replayed, err := engine.Do(ctx, key, func(ctx context.Context, l *idem.Lease) ([]byte, error) {
		if err := l.Check(); err != nil { // just before the side effect
			return nil, idem.NotRun(err) // nothing was charged: the next delivery runs it
		}
		return charge(ctx, msg.Body, l.Fence()) // ctx carries the lease and ends with it
	})
	switch {
	case err == nil && replayed:
		return "ack, replayed: " + string(out)
	case err == nil:
		return "ack: " + string(out)
	case idem.Retryable(err):
		return "redeliver later: " + err.Error()
	case errors.Is(err, idem.ErrOutcomeUnknown):
		return "ack and alert, it may have run: " + err.Error()
	}
	return "drop: " + err.Error()
}

// counter is a charge that counts how often it ran.
type counter struct{ n atomic.Int32 }

func (c *counter) charge(ctx context.Context, body string, fence int64) ([]byte, error) {
	return fmt.Appendf(nil, "ch_%d", c.n.Add(1)), nil
}

// Issue 32 item 1: once a key's result is dropped (Retention) and its
// tombstone kept (KeyRetention), a redelivery gets ErrKeyExpired. Retryable
// said true, so the README's consumer redelivered it on every delivery
// until KeyRetention ended, and then the charge ran again. It is dropped
// (acknowledged) at once, and never charged twice.
func TestReadmeConsumerDropsAnExpiredKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		engine := newEngine(t, mustMem(t), &idem.Options{Retention: time.Hour, KeyRetention: 30 * 24 * time.Hour})
		ctx := context.Background()
		var c counter
		msg := readmeMessage{ID: "msg-42", Body: `{"order":42,"amount":4200}`}
		if got := readmeHandle(ctx, engine, msg, c.charge); got != "ack: ch_1" {
			t.Fatalf("first delivery: %q", got)
		}
		time.Sleep(2 * time.Hour) // the broker redelivers after the result's retention
		got := readmeHandle(ctx, engine, msg, c.charge)
		if !strings.HasPrefix(got, "drop: ") || !strings.Contains(got, "key expired") {
			t.Fatalf("delivery after the result's retention: %q; want it dropped: it ran, and never runs again", got)
		}
		if idem.Retryable(idem.ErrKeyExpired) {
			t.Error("Retryable(ErrKeyExpired) = true")
		}
		if c.n.Load() != 1 {
			t.Fatalf("charged %d times; want 1", c.n.Load())
		}
	})
}

// slowAcquire is a real store whose Acquire answers late, past the lease
// it granted: the worker was paused (GC, a stalled connection) between
// taking the key and its side effect.
type slowAcquire struct {
	store.Store
	delay time.Duration
	slow  atomic.Bool
}

func (s *slowAcquire) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	res, err := s.Store.Acquire(ctx, p)
	if s.slow.Swap(false) {
		time.Sleep(s.delay)
	}
	return res, err
}

// Issue 32 item 2: the README's Check pattern returned Check's error as
// it was, and Do read an error wrapping ErrLeaseExpired as "may have
// run": the key turned UNKNOWN although nothing was charged, and waited
// for an operator. With NotRun the key is released, the delivery is
// redelivered, and the next one charges once.
func TestReadmeConsumerReleasesWorkThatDidNotStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &slowAcquire{Store: mustMem(t), delay: 2 * time.Second}
		engine := newEngine(t, s, &idem.Options{LeaseDuration: time.Second})
		ctx := context.Background()
		var c counter
		msg := readmeMessage{ID: "msg-7", Body: `{"order":7,"amount":700}`}
		s.slow.Store(true)
		if got := readmeHandle(ctx, engine, msg, c.charge); !strings.HasPrefix(got, "redeliver later: ") {
			t.Fatalf("delivery whose lease ended before the charge: %q; want it redelivered", got)
		}
		if got := readmeHandle(ctx, engine, msg, c.charge); got != "ack: ch_1" {
			t.Fatalf("redelivery: %q; want the charge made now", got)
		}
		if got := readmeHandle(ctx, engine, msg, c.charge); got != "ack, replayed: ch_1" || c.n.Load() != 1 {
			t.Fatalf("another redelivery: %q after %d charges; want the replay of the one charge", got, c.n.Load())
		}
	})
}

// providerError is what a provider call's error looks like when its
// client's deadline passed after the request was sent: the URL holds an
// API key and an internal address.
var providerError = &url.Error{Op: "Post", URL: "https://10.0.3.7:8443/v1/charges?api_key=sk_live_4eC39HqLyjWDarjtT1zdp7dc",
	Err: context.DeadlineExceeded}

func holdsSecret(s string) bool {
	return strings.Contains(s, "sk_live") || strings.Contains(s, "10.0.3.7") || strings.Contains(s, "api_key")
}

// Issue 32 item 4: the consumer's charge failed with an error whose text
// holds an API key and an internal address, after the request may have
// been sent (the client's deadline): the key turns UNKNOWN. Its reason,
// kept in the store and shown to every caller that retries the key and
// to operators, used to be that text. It is a fixed phrase, or the
// reason the work chose.
func TestReadmeConsumerKeepsNoSecretInTheReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		engine := newEngine(t, mustMem(t), nil)
		ctx := context.Background()
		for _, tc := range []struct {
			name   string
			err    error
			reason string
		}{
			{"the client's deadline", providerError, "the work's deadline passed while it ran"},
			{"OutcomeUnknown without a reason", idem.OutcomeUnknown(errors.New("POST "+providerError.URL+": connection reset by peer"), ""),
				"the work reported an unknown outcome"},
			{"OutcomeUnknown with a reason", idem.OutcomeUnknown(providerError, "the charge was sent, no answer"), "the charge was sent, no answer"},
		} {
			msg := readmeMessage{ID: tc.name, Body: "{}"}
			fail := func(context.Context, string, int64) ([]byte, error) { return nil, tc.err }
			first := readmeHandle(ctx, engine, msg, fail)
			rec, err := engine.Get(ctx, idem.ID{Tenant: "billing", Key: msg.ID})
			if err != nil || rec.State != idem.StateUnknown || rec.Reason != tc.reason {
				t.Fatalf("%s: record %+v, %v; want UNKNOWN with the reason %q", tc.name, rec, err, tc.reason)
			}
			if !strings.HasPrefix(first, "ack and alert, it may have run: ") { // the same error as every later delivery gets (item 3)
				t.Fatalf("%s: first delivery: %q", tc.name, first)
			}
			if again := readmeHandle(ctx, engine, msg, fail); holdsSecret(again) || !strings.Contains(again, tc.reason) {
				t.Errorf("%s: a later delivery is told %q; want the reason, nothing of the provider's error", tc.name, again)
			}
		}
		page, err := engine.ListUnknown(ctx, idem.ListParams{AllTenants: true, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			if holdsSecret(r.Reason) {
				t.Errorf("an operator's listing shows %q", r.Reason)
			}
		}
	})
}

// readmePaymentService is the README's middleware quick start: the
// middleware with RequireKey in front of a payment handler.
func readmePaymentService(t *testing.T, charges *atomic.Int32) http.Handler {
	engine := newEngine(t, mustMem(t), nil)
	mw, err := idemhttp.New(engine, &idemhttp.Options{RequireKey: true})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lease, ok := idem.LeaseFromContext(r.Context())
		if !ok || lease.Check() != nil { // just before the side effect
			idemhttp.SetDisposition(r.Context(), idemhttp.DispositionRelease, "") // nothing ran (a 503 alone: UNKNOWN)
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "{\"charge\":\"ch_%d\",\"client\":%q}\n", charges.Add(1), r.Header.Get("X-Client"))
	})))
	return mux
}

// Issue 32 item 5: two clients without credentials that happen to use the
// same key used to share the scope "": the second got the first's charge
// replayed, with the first client's data in it. They are refused with 400
// tenant_missing; clients with credentials each get their own.
func TestReadmePaymentServiceRefusesAnonymousClients(t *testing.T) {
	var charges atomic.Int32
	srv := httptest.NewServer(readmePaymentService(t, &charges))
	defer srv.Close()
	pay := func(client, auth string) (int, string) {
		return readmePay(t, srv, client, auth, "order-1")
	}
	for _, client := range []string{"alice", "bob"} {
		if status, body := pay(client, ""); status != http.StatusBadRequest || !strings.Contains(body, "tenant_missing") {
			t.Fatalf("anonymous %s: %d %s; want 400 tenant_missing", client, status, body)
		}
	}
	_, a := pay("alice", "Bearer alice")
	_, b := pay("bob", "Bearer bob")
	if !strings.Contains(a, `"alice"`) || !strings.Contains(b, `"bob"`) || charges.Load() != 2 {
		t.Fatalf("clients with credentials got %q and %q after %d charges; want one charge each", a, b, charges.Load())
	}
}

// Issue 34: the README's payment service answered a POST without a key
// with its handler's "503 try again" (the request passed through
// unprotected, without a lease). With RequireKey it is a 400 that says
// what is missing, and nothing is charged.
func TestReadmePaymentServiceRequiresAKey(t *testing.T) {
	var charges atomic.Int32
	srv := httptest.NewServer(readmePaymentService(t, &charges))
	defer srv.Close()
	status, body := readmePay(t, srv, "alice", "Bearer alice", "")
	if status != http.StatusBadRequest || !strings.Contains(body, "key_required") || charges.Load() != 0 {
		t.Fatalf("a POST without a key: %d %s after %d charges; want 400 key_required and none", status, body, charges.Load())
	}
}

// readmePay sends the README's payment as client, with auth and key when
// they are not empty.
func readmePay(t *testing.T, srv *httptest.Server, client, auth, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":4200}`))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("X-Client", client)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
