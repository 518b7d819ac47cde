package idemclient_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemhttp"
)

// TestOutcomeUnknownInStripeFormat: a server that writes its errors in
// Stripe's shape (idemhttp.ErrorFormatStripe, idem serve --error-format
// stripe) says outcome_unknown in the error object's idem_code. Retrying
// reads it as it reads the problem's code: an *OutcomeUnknownError, not a
// plain 503 that reads as a failure to try again under a new key.
func TestOutcomeUnknownInStripeFormat(t *testing.T) {
	var calls atomic.Int32
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		idemhttp.WriteStripeError(w, http.StatusServiceUnavailable, idemhttp.CodeOutcomeUnknown, "it may have taken effect")
	})
	c, _ := newRetrying(t, transport(t), idemclient.RetryOptions{})
	resp, err := post(t, c, context.Background(), srv.URL, `{}`)
	if resp != nil {
		resp.Body.Close()
	}
	var ue *idemclient.OutcomeUnknownError
	if !errors.As(err, &ue) || ue.Code != idemhttp.CodeOutcomeUnknown || ue.Key == "" {
		t.Fatalf("err %v after %d calls; want an *OutcomeUnknownError with the key", err, calls.Load())
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d calls; want 1: no Retry-After, nothing settles the key by itself", n)
	}
}
