package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// post sends one payment request and prints what came back.
func post(url, key, body string) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk_test_alice") // keys are scoped by the client's credentials
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	fmt.Printf("%d replayed=%q %s\n", res.StatusCode, res.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
}

// The middleware in front of a plain net/http handler: a retry gets the
// stored answer, a reuse of the key for another payment gets 422.
func Example() {
	store, _ := memstore.New(nil)
	engine, _ := idem.New(store, nil)
	mw, err := idemhttp.New(engine, nil)
	if err != nil {
		panic(err)
	}
	charges := 0
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, charges)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post(srv.URL+"/payments", "order-42", `{"amount": 100}`)
	post(srv.URL+"/payments", "order-42", `{ "amount":100 }`) // the same payment, re-serialised
	post(srv.URL+"/payments", "order-42", `{"amount": 200}`)
	fmt.Println("charges:", charges)
	// Output:
	// 201 replayed="" {"charge":1}
	// 201 replayed="true" {"charge":1}
	// 422 replayed="" {"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#key_mismatch","title":"Idempotency-Key reused with a different request","status":422,"detail":"this key was used for a request with a different method, path, query, content type or body","code":"key_mismatch"}
	// charges: 1
}

// The middleware on a chi sub-router, with options of its own: keys are
// required there and results kept for 72 hours.
func Example_chi() {
	store, _ := memstore.New(nil)
	engine, _ := idem.New(store, nil)
	mw, err := idemhttp.New(engine, &idemhttp.Options{RequireKey: true, Retention: 72 * time.Hour})
	if err != nil {
		panic(err)
	}
	r := chi.NewRouter()
	r.Route("/refunds", func(r chi.Router) {
		r.Use(mw)
		r.Post("/{id}", func(w http.ResponseWriter, r *http.Request) {
			l, _ := idem.LeaseFromContext(r.Context())
			fmt.Fprintf(w, `{"refund":%q,"fenced":%t}`, chi.URLParam(r, "id"), l.Fence() > 0)
		})
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	post(srv.URL+"/refunds/r1", "refund-1", `{}`)
	post(srv.URL+"/refunds/r1", "refund-1", `{}`)
	res, _ := http.Post(srv.URL+"/refunds/r1", "application/json", strings.NewReader(`{}`))
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("Content-Type"))
	// Output:
	// 200 replayed="" {"refund":"r1","fenced":true}
	// 200 replayed="true" {"refund":"r1","fenced":true}
	// 400 application/problem+json
}
