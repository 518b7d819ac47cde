package idemhttp_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/idemkit/idem/idemhttp"
)

// A key in flight, in Stripe's format: the 429 lock_timeout that
// stripe-go retries, with idem's own code kept in idem_code.
func ExampleWriteStripeError() {
	rec := httptest.NewRecorder()
	rec.Header().Set("Retry-After", "2")
	idemhttp.WriteStripeError(rec, 409, idemhttp.CodeKeyInFlight, "a request with this key is being processed")
	fmt.Println(rec.Code, rec.Header().Get("Stripe-Should-Retry"), rec.Header().Get("Retry-After"))
	fmt.Print(rec.Body.String())
	// Output:
	// 429 true 2
	// {"error":{"type":"idempotency_error","code":"lock_timeout","message":"a request with this key is being processed","doc_url":"https://github.com/idemkit/idem/blob/main/docs/problems.md#key_in_flight","idem_code":"key_in_flight"}}
}
