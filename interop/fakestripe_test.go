package interop

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fault is what the fake Stripe does to one request.
type fault struct {
	delay     time.Duration
	status503 bool // answer a Stripe-shaped 503 before charging (nothing happened)
	plain503  bool // answer a 503 with a plain body, as a proxy in front of the API does (nothing happened)
	dropAfter bool // charge, then drop the connection without an answer
	dropFirst bool // drop the connection without charging
}

// charge is one charge the fake made.
type charge struct {
	ID, APIKey, IdemKey string
	Amount              int64
}

// fakeStripe is a Stripe-shaped /v1/charges that never deduplicates: every
// request it lets through makes a charge. plan decides each request's
// fault by its API key, idempotency key and the number of requests seen
// with that pair.
type fakeStripe struct {
	*httptest.Server
	plan func(apiKey, idemKey, description string, n int) fault

	mu      sync.Mutex
	charges []charge       // guarded by mu
	seen    map[string]int // requests per API key and idempotency key; guarded by mu
	reqs    int            // guarded by mu
}

func newFakeStripe(plan func(apiKey, idemKey, description string, n int) fault) *fakeStripe {
	f := &fakeStripe{plan: plan, seen: map[string]int{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

func (f *fakeStripe) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || (r.URL.Path != "/v1/charges" && r.URL.Path != "/v1/refunds") {
		http.NotFound(w, r)
		return
	}
	apiKey := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	idemKey := r.Header.Get("Idempotency-Key")
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.reqs++
	f.seen[apiKey+"\x00"+idemKey]++
	n, reqID := f.seen[apiKey+"\x00"+idemKey], "req_"+strconv.Itoa(f.reqs)
	f.mu.Unlock()
	ft := fault{}
	if f.plan != nil {
		ft = f.plan(apiKey, idemKey, r.PostForm.Get("description"), n)
	}
	time.Sleep(ft.delay) // the work takes this long
	h := w.Header()
	h.Set("Request-Id", reqID)
	h.Set("Stripe-Version", "2025-03-31.basil")
	if idemKey != "" {
		h.Set("Idempotency-Key", idemKey)
	}
	switch {
	case ft.dropFirst:
		drop(w)
		return
	case ft.plain503:
		h.Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "upstream overloaded")
		return
	case ft.status503:
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"error":{"type":"api_error","message":"try again later"}}`)
		return
	}
	amount, _ := strconv.ParseInt(r.PostForm.Get("amount"), 10, 64)
	f.mu.Lock()
	c := charge{ID: fmt.Sprintf("ch_%06d", len(f.charges)+1), APIKey: apiKey, IdemKey: idemKey, Amount: amount}
	f.charges = append(f.charges, c)
	f.mu.Unlock()
	if ft.dropAfter {
		drop(w)
		return
	}
	h.Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": c.ID, "object": "charge", "amount": amount, "currency": r.PostForm.Get("currency"), "paid": true})
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

// chargesFor returns the charges made for an API key and idempotency key.
func (f *fakeStripe) chargesFor(apiKey, idemKey string) []charge {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []charge
	for _, c := range f.charges {
		if c.APIKey == apiKey && c.IdemKey == idemKey {
			out = append(out, c)
		}
	}
	return out
}

// chargesOf returns every charge made with an API key.
func (f *fakeStripe) chargesOf(apiKey string) []charge {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []charge
	for _, c := range f.charges {
		if c.APIKey == apiKey {
			out = append(out, c)
		}
	}
	return out
}
