package interop

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/idemkit/idem/idemhttp"
)

// planner dispatches the fake's fault plan by API key: each scenario has
// its own key, and so its own plan and charges.
type planner struct{ plans sync.Map } // API key -> func(idemKey, description string, n int) fault

func (p *planner) plan(apiKey, idemKey, desc string, n int) fault {
	if f, ok := p.plans.Load(apiKey); ok {
		return f.(func(string, string, int) fault)(idemKey, desc, n)
	}
	return fault{}
}

// countingTransport counts the HTTP requests a client sends.
type countingTransport struct {
	http.Transport
	n atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.Transport.RoundTrip(r)
}

// sdk is a stripe-go client of one API key against the gateway at base.
type sdk struct {
	*stripe.Client
	sent *countingTransport
}

func newSDK(t *testing.T, base, apiKey string, retries int64, timeout time.Duration) sdk {
	tr := &countingTransport{Transport: *http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(tr.CloseIdleConnections)
	b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(base),
		MaxNetworkRetries: stripe.Int64(retries),
		HTTPClient:        &http.Client{Timeout: timeout, Transport: tr},
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
	})
	return sdk{Client: stripe.NewClient(apiKey, stripe.WithBackends(&stripe.Backends{API: b, Connect: b, Uploads: b, MeterEvents: b})), sent: tr}
}

func (s sdk) charge(key string, amount int64) (*stripe.Charge, error) {
	p := &stripe.ChargeCreateParams{Amount: stripe.Int64(amount), Currency: stripe.String("usd")}
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	return s.V1Charges.Create(context.Background(), p)
}

// wantStripeError asserts that err is the *stripe.Error the stripe format
// promises: status, type and code.
func wantStripeError(t *testing.T, err error, status int, typ stripe.ErrorType, code string) *stripe.Error {
	t.Helper()
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not a *stripe.Error", err, err)
	}
	if se.HTTPStatusCode != status || se.Type != typ || string(se.Code) != code {
		t.Fatalf("stripe error %d %s %s, want %d %s %s: %v", se.HTTPStatusCode, se.Type, se.Code, status, typ, code, se)
	}
	return se
}

func oneCharge(t *testing.T, up *fakeStripe, apiKey, idemKey string, ch *stripe.Charge) {
	t.Helper()
	cs := up.chargesFor(apiKey, idemKey)
	if len(cs) != 1 || (ch != nil && cs[0].ID != ch.ID) {
		t.Fatalf("key %s: charges %v, want exactly one, %v", idemKey, cs, ch)
	}
}

// TestStripeGo runs stripe-go with retries against `idem serve
// --error-format stripe` in front of a fake Stripe that never
// deduplicates, on each store.
func TestStripeGo(t *testing.T) {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	p := &planner{}
	up := newFakeStripe(p.plan)
	t.Cleanup(up.Close) // after the parallel subtests
	for name, store := range stores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			reachable(t, store)
			base := startServe(t, "--upstream", up.URL, "--store", store, "--error-format", "stripe", "--config", sheddingConfig(t))
			key := func(scenario string) string { return "sk_test_" + run + "_" + name + "_" + scenario }
			scenarios := map[string]func(t *testing.T, apiKey string){
				"replays":        func(t *testing.T, k string) { replays(t, base, up, k) },
				"slow-first-try": func(t *testing.T, k string) { slowFirstTry(t, base, up, p, k) },
				"5xx-then-ok":    func(t *testing.T, k string) { fiveXXThenSuccess(t, base, up, p, k) },
				"other-amount":   func(t *testing.T, k string) { otherAmount(t, base, up, k) },
				"two-api-keys":   func(t *testing.T, k string) { twoAPIKeys(t, base, up, k) },
				"unknown":        func(t *testing.T, k string) { unknownOutcome(t, base, up, p, k) },
				"retry-after":    func(t *testing.T, k string) { retryAfter(t, base, p, k) },
				"burst":          func(t *testing.T, k string) { burst(t, base, up, p, k) },
			}
			for s, f := range scenarios {
				t.Run(s, func(t *testing.T) {
					t.Parallel()
					f(t, key(s))
				})
			}
		})
	}
}

// replays: a call without a key (stripe-go makes one) charges once; a call
// with an explicit key sent again replays the charge with the original
// Request-Id and the key; the same form with its parameters in another
// order replays too; an invalid key is a 400 that is not retried.
func replays(t *testing.T, base string, up *fakeStripe, apiKey string) {
	c := newSDK(t, base, apiKey, 2, 20*time.Second)
	ch, err := c.charge("", 100)
	if err != nil {
		t.Fatal(err)
	}
	if cs := up.chargesOf(apiKey); len(cs) != 1 || cs[0].ID != ch.ID {
		t.Fatalf("charges %v for %s", cs, ch.ID)
	}
	first, err := c.charge("explicit", 250)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.charge("explicit", 250)
	if err != nil {
		t.Fatal(err)
	}
	lr := again.LastResponse
	if again.ID != first.ID || lr.Header.Get("Idempotent-Replayed") != "true" || lr.RequestID != first.LastResponse.RequestID ||
		lr.RequestID == "" || lr.IdempotencyKey != "explicit" {
		t.Fatalf("replay %s (request id %q, key %q, replayed %q); want %s with request id %q and the key", again.ID, lr.RequestID,
			lr.IdempotencyKey, lr.Header.Get("Idempotent-Replayed"), first.ID, first.LastResponse.RequestID)
	}
	oneCharge(t, up, apiKey, "explicit", first)

	// stripe-go writes amount before currency; another client may not.
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/charges", strings.NewReader("currency=usd&amount=250"))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", "explicit")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same form in another order: %d, replayed %q; want the replay", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
	oneCharge(t, up, apiKey, "explicit", first)

	before := c.sent.n.Load()
	_, err = c.charge("bad,key", 100)
	wantStripeError(t, err, 400, stripe.ErrorTypeInvalidRequest, idemhttp.CodeKeyInvalid)
	if n := c.sent.n.Load() - before; n != 1 {
		t.Errorf("an invalid key was sent %d times; want once, not retried", n)
	}
}

// slowFirstTry: the first try takes longer than the client's timeout;
// stripe-go retries, gets 429 lock_timeout while it runs (which it
// retries), then the replay: one charge. A client without retries gets
// the typed 429 in the meantime.
func slowFirstTry(t *testing.T, base string, up *fakeStripe, p *planner, apiKey string) {
	started := make(chan struct{})
	p.plans.Store(apiKey, func(_, _ string, n int) fault {
		if n == 1 {
			close(started)
			return fault{delay: 3 * time.Second}
		}
		return fault{}
	})
	c := newSDK(t, base, apiKey, 8, time.Second)
	type result struct {
		ch  *stripe.Charge
		err error
	}
	done := make(chan result, 1)
	go func() {
		ch, err := c.charge("slow", 500)
		done <- result{ch, err}
	}()
	<-started
	impatient := newSDK(t, base, apiKey, 0, 20*time.Second)
	_, err := impatient.charge("slow", 500)
	se := wantStripeError(t, err, 429, stripe.ErrorTypeIdempotency, string(stripe.ErrorCodeLockTimeout))
	if !errors.As(err, new(*stripe.IdempotencyError)) {
		t.Errorf("the 429 is not a *stripe.IdempotencyError: %v", se)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("the slow call with retries failed: %v", r.err)
	}
	oneCharge(t, up, apiKey, "slow", r.ch)
	if c.sent.n.Load() < 2 {
		t.Errorf("the client sent %d requests; its first timed out, so it must have retried", c.sent.n.Load())
	}
}

// sheddingConfig writes the routes of the fake Stripe, whose 503 comes
// before any work: its route releases the key on a 503 (by default a 503
// turns it UNKNOWN, for it may come after the work).
func sheddingConfig(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "idem.yaml")
	routes := "routes:\n  - match: POST /v1/charges\n    statuses:\n      release: [\"503\"]\n"
	if err := os.WriteFile(path, []byte(routes), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// fiveXXThenSuccess: a 503 the upstream answers before doing anything,
// which its route declares (sheddingConfig), releases the key. With a
// plain body (a proxy's) stripe-go retries by
// itself; with Stripe's error object it hands the typed 503 to the
// application, whose retry with the key succeeds. One charge each.
func fiveXXThenSuccess(t *testing.T, base string, up *fakeStripe, p *planner, apiKey string) {
	p.plans.Store(apiKey, func(key, _ string, n int) fault {
		if n == 1 {
			return fault{plain503: key == "plain", status503: key == "shaped"}
		}
		return fault{}
	})
	c := newSDK(t, base, apiKey, 2, 20*time.Second)
	ch, err := c.charge("plain", 100)
	if err != nil {
		t.Fatalf("503 with a plain body, then success: %v", err)
	}
	oneCharge(t, up, apiKey, "plain", ch)
	_, err = c.charge("shaped", 100)
	wantStripeError(t, err, 503, stripe.ErrorTypeAPI, "")
	if len(up.chargesFor(apiKey, "shaped")) != 0 {
		t.Fatal("a 503 charged")
	}
	ch, err = c.charge("shaped", 100)
	if err != nil {
		t.Fatalf("the application's retry after a typed 503: %v", err)
	}
	oneCharge(t, up, apiKey, "shaped", ch)
}

// otherAmount: the same key with another amount is a 400
// idempotency_error, not retried, and charges nothing more.
func otherAmount(t *testing.T, base string, up *fakeStripe, apiKey string) {
	c := newSDK(t, base, apiKey, 2, 20*time.Second)
	ch, err := c.charge("amount", 100)
	if err != nil {
		t.Fatal(err)
	}
	before := c.sent.n.Load()
	_, err = c.charge("amount", 200)
	wantStripeError(t, err, 400, stripe.ErrorTypeIdempotency, idemhttp.CodeKeyMismatch)
	if !errors.As(err, new(*stripe.IdempotencyError)) {
		t.Errorf("the mismatch is not a *stripe.IdempotencyError: %v", err)
	}
	if n := c.sent.n.Load() - before; n != 1 {
		t.Errorf("the mismatch was sent %d times; want once, not retried", n)
	}
	oneCharge(t, up, apiKey, "amount", ch)
}

// twoAPIKeys: one idempotency key under two API keys is two charges, each
// replayed to its own key.
func twoAPIKeys(t *testing.T, base string, up *fakeStripe, apiKey string) {
	a, b := newSDK(t, base, apiKey+"_a", 2, 20*time.Second), newSDK(t, base, apiKey+"_b", 2, 20*time.Second)
	cha, err := a.charge("shared", 100)
	if err != nil {
		t.Fatal(err)
	}
	chb, err := b.charge("shared", 100)
	if err != nil {
		t.Fatal(err)
	}
	if cha.ID == chb.ID {
		t.Fatalf("two API keys got the same charge %s", cha.ID)
	}
	for _, c := range []struct {
		s      sdk
		apiKey string
		want   *stripe.Charge
	}{{a, apiKey + "_a", cha}, {b, apiKey + "_b", chb}} {
		again, err := c.s.charge("shared", 100)
		if err != nil || again.ID != c.want.ID {
			t.Fatalf("replay for %s: %v %v, want %s", c.apiKey, again, err, c.want.ID)
		}
		oneCharge(t, up, c.apiKey, "shared", c.want)
	}
}

// unknownOutcome: the upstream charges and drops the connection: 502
// upstream_no_response (not retried: the key is UNKNOWN), then 503
// outcome_unknown on the application's retry; never a second charge.
func unknownOutcome(t *testing.T, base string, up *fakeStripe, p *planner, apiKey string) {
	p.plans.Store(apiKey, func(_, _ string, n int) fault { return fault{dropAfter: n == 1} })
	c := newSDK(t, base, apiKey, 2, 20*time.Second)
	_, err := c.charge("dropped", 100)
	wantStripeError(t, err, 502, stripe.ErrorTypeAPI, "upstream_no_response")
	if c.sent.n.Load() != 1 {
		t.Errorf("upstream_no_response was sent %d times; want once", c.sent.n.Load())
	}
	_, err = c.charge("dropped", 100)
	wantStripeError(t, err, 503, stripe.ErrorTypeAPI, idemhttp.CodeOutcomeUnknown)
	oneCharge(t, up, apiKey, "dropped", nil)
}

// retryAfter: after two refunds that took 2s, the Retry-After for a third
// one in flight is at most 3s (the lease has 30s).
func retryAfter(t *testing.T, base string, p *planner, apiKey string) {
	started := make(chan string, 3)
	p.plans.Store(apiKey, func(key, _ string, _ int) fault {
		started <- key
		return fault{delay: 2 * time.Second}
	})
	post := func(key string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/refunds", strings.NewReader("charge=ch_1"))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	post("warm-1")
	post("warm-2")
	done := make(chan struct{})
	go func() { defer close(done); post("hot") }()
	for k := range started {
		if k == "hot" {
			break
		}
	}
	resp := post("hot")
	<-done
	after, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != 429 || err != nil || after < 1 || after > 3 {
		t.Fatalf("in flight: %d with Retry-After %q; want 429 with 1..3 (the refunds take 2s, the lease 30s)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	t.Logf("%s: Retry-After for a refund in flight that usually takes 2s: %ds (lease 30s)", t.Name(), after)
}

// burstSize is goroutines x calls: INTEROP_BURST, or the 50x20 of issue
// 14 (about 3s per store on a loaded 2-core machine).
func burstSize(t *testing.T) (int, int) {
	g, c := 50, 20
	if s := os.Getenv("INTEROP_BURST"); s != "" {
		if _, err := fmt.Sscanf(s, "%dx%d", &g, &c); err != nil {
			t.Fatalf("INTEROP_BURST=%q: want GxC", s)
		}
	}
	return g, c
}

// burst: goroutines making calls with random delays, 503s and dropped
// connections at the upstream. Every key charges at most once; every call
// that succeeded charged exactly once, the charge it returned; every call
// that failed failed with a *stripe.Error of a kind the stripe format
// promises.
func burst(t *testing.T, base string, up *fakeStripe, p *planner, apiKey string) {
	p.plans.Store(apiKey, func(_, _ string, n int) fault {
		f := fault{delay: time.Duration(rand.IntN(100)) * time.Millisecond}
		switch x := rand.IntN(100); {
		case x < 10:
			f.status503 = true
		case x < 14:
			f.dropFirst = true
		case x < 18:
			f.dropAfter = true
		}
		return f
	})
	goroutines, calls := burstSize(t)
	type outcome struct {
		key string
		ch  *stripe.Charge
		err error
	}
	results := make(chan outcome, goroutines*calls)
	var wg sync.WaitGroup
	for g := range goroutines {
		c := newSDK(t, base, apiKey, 2, 30*time.Second)
		wg.Go(func() {
			for i := range calls {
				time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // clients' own pacing, not synchronisation
				key := fmt.Sprintf("burst-%d-%d", g, i)
				ch, err := c.charge(key, int64(100+i))
				results <- outcome{key, ch, err}
			}
		})
	}
	wg.Wait()
	close(results)
	kinds := map[string]int{}
	for r := range results {
		cs := up.chargesFor(apiKey, r.key)
		if len(cs) > 1 {
			t.Errorf("%s: charged %d times", r.key, len(cs))
		}
		if r.err == nil {
			kinds["ok"]++
			if len(cs) != 1 || cs[0].ID != r.ch.ID {
				t.Errorf("%s succeeded with %s; charges %v", r.key, r.ch.ID, cs)
			}
			continue
		}
		var se *stripe.Error
		if !errors.As(r.err, &se) {
			t.Errorf("%s: %v (%T) is not a *stripe.Error", r.key, r.err, r.err)
			continue
		}
		kind := fmt.Sprintf("%d %s %s", se.HTTPStatusCode, se.Type, se.Code)
		kinds[kind]++
		switch kind {
		case "503 api_error ": // the upstream's own 503: released, nothing charged
			if len(cs) != 0 {
				t.Errorf("%s: the upstream answered 503 and charged", r.key)
			}
		case "502 api_error upstream_no_response", "429 idempotency_error lock_timeout":
		default:
			t.Errorf("%s: unexpected error %s", r.key, kind)
		}
	}
	t.Logf("%s: burst %dx%d: %v; charges %d", t.Name(), goroutines, calls, kinds, len(up.chargesOf(apiKey)))
	if kinds["ok"] == 0 {
		t.Error("no call succeeded")
	}
}
