package idemclient_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"

	"github.com/idemkit/idem/idemclient"
)

// fakeProvider is a Stripe-style payment API: it executes a charge once per
// Idempotency-Key and replays the stored answer, marked
// Idempotent-Replayed: true, to every later request with that key.
type fakeProvider struct {
	mu      sync.Mutex
	charges int
	answers map[string]string
}

func (p *fakeProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if answer, ok := p.answers[key]; ok {
		w.Header().Set("Idempotent-Replayed", "true")
		io.WriteString(w, answer)
		return
	}
	r.ParseForm()
	p.charges++
	answer := fmt.Sprintf(`{"id":"ch_%d","amount":%s}`, p.charges, r.PostForm.Get("amount"))
	p.answers[key] = answer
	io.WriteString(w, answer)
}

// Example shows a handler that charges a card through a provider and is run
// twice for one inbound request, as happens when a worker dies after the
// charge but before idem stored the result and a retry runs the handler
// again. Both runs send the provider the key derived from (tenant, key,
// "charge"), so the card is charged once.
func Example() {
	provider := &fakeProvider{answers: map[string]string{}}
	srv := httptest.NewServer(provider)
	defer srv.Close()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()

	client := &http.Client{Transport: &idemclient.Propagator{Base: tr}}

	// handler is the body of an inbound request served under idem; the
	// middleware has put the inbound scope in ctx with WithScope.
	handler := func(ctx context.Context) {
		ctx = idemclient.WithStep(ctx, "charge")
		form := url.Values{"amount": {"2000"}}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Printf("%s replayed=%v\n", body, idemclient.Replayed(resp))
	}

	inbound := idemclient.WithScope(context.Background(), "acme", "order-42")
	handler(inbound) // the first run
	handler(inbound) // the retried run, on this or another worker

	provider.mu.Lock()
	fmt.Println("charges:", provider.charges)
	provider.mu.Unlock()
	// Output:
	// {"id":"ch_1","amount":2000} replayed=false
	// {"id":"ch_1","amount":2000} replayed=true
	// charges: 1
}
