package idemhttp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// checkStripe asserts that r is a stripe-format error with status, type,
// Stripe code and Stripe-Should-Retry.
func checkStripe(t testing.TB, r response, status int, typ, code, retry string) idemhttp.StripeErrorObject {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (body %s)", r.status, status, r.body)
	}
	var e idemhttp.StripeError
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("stripe body %q: %v", r.body, err)
	}
	if e.Error.Type != typ || e.Error.Code != code || e.Error.Message == "" || !strings.HasPrefix(e.Error.DocURL, idemhttp.ProblemTypeBase) {
		t.Errorf("error %+v, want type %s code %s with message and doc_url", e.Error, typ, code)
	}
	if got := r.header.Get("Stripe-Should-Retry"); got != retry {
		t.Errorf("Stripe-Should-Retry %q, want %q", got, retry)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	return e.Error
}

// With ErrorFormatStripe every error is Stripe's error object: a changed
// payload is 400 idempotency_error and not retried, a key in flight is the
// 429 lock_timeout stripe-go retries, a missing key is
// invalid_request_error; MismatchStatus overrides the mismatch status.
func TestStripeErrorFormat(t *testing.T) {
	store, _ := memstore.New(nil)
	e := newEngine(t, store, nil)
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	})
	srv := serve(t, newMiddleware(t, e, &idemhttp.Options{ErrorFormat: idemhttp.ErrorFormatStripe, RequireKey: true})(h))
	form := "application/x-www-form-urlencoded"
	if r := (call{key: "s1", ct: form, body: "amount=100"}).send(t, srv); r.status != http.StatusCreated {
		t.Fatalf("first call %d", r.status)
	}
	checkStripe(t, call{key: "s1", ct: form, body: "amount=200"}.send(t, srv), 400, "idempotency_error", "key_mismatch", "false")
	checkStripe(t, call{ct: form, body: "amount=1"}.send(t, srv), 400, "invalid_request_error", "key_required", "false")

	done := make(chan response)
	go func() { done <- call{path: "/slow", key: "s2"}.send(t, srv) }()
	<-entered
	r := call{path: "/slow", key: "s2"}.send(t, srv)
	o := checkStripe(t, r, 429, "idempotency_error", "lock_timeout", "true")
	if o.IdemCode != idemhttp.CodeKeyInFlight || r.header.Get("Retry-After") == "" {
		t.Errorf("in flight: idem_code %q, Retry-After %q", o.IdemCode, r.header.Get("Retry-After"))
	}
	once.Do(func() { close(release) })
	if r := <-done; r.status != http.StatusCreated {
		t.Fatalf("slow call %d", r.status)
	}

	over := serve(t, newMiddleware(t, e, &idemhttp.Options{ErrorFormat: idemhttp.ErrorFormatStripe, MismatchStatus: 422, Tenant: func(*http.Request) (string, error) { return "o", nil }})(h))
	call{key: "s3", body: "a"}.send(t, over)
	checkStripe(t, call{key: "s3", body: "b"}.send(t, over), 422, "idempotency_error", "key_mismatch", "false")

	plain := serve(t, newMiddleware(t, e, &idemhttp.Options{Tenant: func(*http.Request) (string, error) { return "p", nil }})(h))
	call{key: "s4", body: "a"}.send(t, plain)
	checkProblem(t, call{key: "s4", body: "b"}.send(t, plain), 422, idemhttp.CodeKeyMismatch)

	for _, bad := range []idemhttp.Options{{MismatchStatus: 200}, {ErrorFormat: 7}} {
		if _, err := idemhttp.New(e, &bad); err == nil {
			t.Errorf("New accepted %+v", bad)
		}
	}
	if f, err := idemhttp.ParseErrorFormat("stripe"); err != nil || f != idemhttp.ErrorFormatStripe || f.String() != "stripe" {
		t.Errorf("ParseErrorFormat(stripe) = %v, %v", f, err)
	}
	if _, err := idemhttp.ParseErrorFormat("xml"); err == nil {
		t.Error("ParseErrorFormat accepted xml")
	}
}

// A form body sent again with its parameters in another order, or other
// percent-encodings, replays; a changed value, or the values of one name
// in another order, is a mismatch.
func TestFormBodyFingerprint(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		e := newEngine(t, newStore(t), nil)
		runs := 0
		srv := serve(t, newMiddleware(t, e, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.WriteHeader(http.StatusCreated)
		})))
		const form = "application/x-www-form-urlencoded"
		key := "form-" + t.Name()
		first := call{key: key, ct: form, body: "amount=100&currency=usd&description=a+b&tags[]=x&tags[]=y"}.send(t, srv)
		for _, body := range []string{
			"currency=usd&amount=100&tags[]=x&description=a%20b&tags[]=y",
			"description=a+b&tags%5B%5D=x&amount=%31%30%30&&tags%5b%5d=y&currency=usd",
		} {
			if r := (call{key: key, ct: form, body: body}).send(t, srv); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Errorf("%s: %d replayed=%q, want the replay", body, r.status, r.header.Get(idemhttp.HeaderReplayed))
			}
		}
		for _, body := range []string{
			"amount=200&currency=usd&description=a+b&tags[]=x&tags[]=y",
			"amount=100&currency=usd&description=a+b&tags[]=y&tags[]=x",
			"amount=100&currency=usd&description=a+b&tags[]=x",
		} {
			checkProblem(t, call{key: key, ct: form, body: body}.send(t, srv), 422, idemhttp.CodeKeyMismatch)
		}
		if first.status != http.StatusCreated || runs != 1 {
			t.Fatalf("first %d, the handler ran %d times; want 201 once", first.status, runs)
		}
	})
}

// A replay carries the request's Idempotency-Key and the ReplayHeaders of
// the original response, never a forbidden header.
func TestReplayEchoesKeyAndHeaders(t *testing.T) {
	store, _ := memstore.New(nil)
	e := newEngine(t, store, nil)
	n := 0
	srv := serve(t, newMiddleware(t, e, &idemhttp.Options{ReplayHeaders: []string{"request-id", "Stripe-Version"}})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		w.Header().Set("Request-Id", "req_"+strings.Repeat("1", n))
		w.Header().Set("Stripe-Version", "2025-01-01")
		w.Header().Set("X-Other", "x")
		w.Header().Set("Set-Cookie", "s=1")
		w.WriteHeader(http.StatusOK)
	})))
	call{key: "h1"}.send(t, srv)
	r := call{key: "h1"}.send(t, srv)
	if r.header.Get("Request-Id") != "req_1" || r.header.Get("Stripe-Version") != "2025-01-01" || r.header.Get(idemhttp.HeaderKey) != "h1" {
		t.Errorf("replay headers %v: want the original Request-Id req_1, Stripe-Version and Idempotency-Key h1", r.header)
	}
	if r.header.Get("X-Other") != "" || r.header.Get("Set-Cookie") != "" {
		t.Errorf("replay carries headers it must not: %v", r.header)
	}
	for _, bad := range []string{"Set-Cookie", "authorization", "Connection", "Transfer-Encoding"} {
		if _, err := idemhttp.New(e, &idemhttp.Options{ReplayHeaders: []string{bad}}); err == nil {
			t.Errorf("ReplayHeaders %s accepted", bad)
		}
	}
}

// The 409's Retry-After follows how long the route's recent executions
// took, not the lease: after requests that took 2s, a retry 500ms into the
// next one is told 2s (1.5s rounded up), where the lease has 30s left.
// It runs in a synctest bubble, so the handler's 2s cost no real time.
func TestRetryAfterFromRecentDurations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, _ := memstore.New(nil)
		e := newEngine(t, store, &idem.Options{LeaseDuration: 30 * time.Second})
		mw := newMiddleware(t, e, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(2 * time.Second)
			w.WriteHeader(http.StatusCreated)
		}))
		do := func(key string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
			req.Header.Set(idemhttp.HeaderKey, key)
			rec := httptest.NewRecorder()
			mw.ServeHTTP(rec, req)
			return rec
		}
		inFlight := func(key string) string {
			go do(key)
			time.Sleep(500 * time.Millisecond)
			rec := do(key)
			if rec.Code != http.StatusConflict {
				t.Fatalf("%d, want 409", rec.Code)
			}
			synctest.Wait()
			time.Sleep(2 * time.Second) // the first finishes
			return rec.Header().Get("Retry-After")
		}
		if got := inFlight("cold"); got != "30" {
			t.Errorf("Retry-After with no executions to go by %q, want the lease's 30", got)
		}
		for i := range 5 {
			do("warm-" + string(rune('a'+i)))
		}
		if got := inFlight("hot"); got != "2" {
			t.Errorf("Retry-After after 2s executions %q, want 2", got)
		}

		// --wait: the answer when the wait ends is estimated the same way.
		waiting := newMiddleware(t, e, &idemhttp.Options{Wait: 500 * time.Millisecond})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(2 * time.Second)
			w.WriteHeader(http.StatusCreated)
		}))
		send := func(key string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("{}"))
			req.Header.Set(idemhttp.HeaderKey, key)
			rec := httptest.NewRecorder()
			waiting.ServeHTTP(rec, req)
			return rec
		}
		send("wait-warm-1")
		send("wait-warm-2")
		go send("wait-hot")
		time.Sleep(500 * time.Millisecond)
		rec := send("wait-hot") // waits 500ms, 1s into the 2s run
		if rec.Code != http.StatusConflict || rec.Header().Get("Retry-After") != "1" {
			t.Errorf("after the wait: %d with Retry-After %q, want 409 with 1", rec.Code, rec.Header().Get("Retry-After"))
		}
		synctest.Wait()
		time.Sleep(2 * time.Second)
	})
}
