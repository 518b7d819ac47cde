package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// The card network took the charge, then the connection broke before its
// answer came back: the outcome is unknown, so the work reports it with
// OutcomeUnknown and the key turns UNKNOWN instead of being released. The
// next delivery does not charge again: Reconcile looks the charge up at
// the provider by the key, finds it, and its result is recorded and
// replayed.
func ExampleOutcomeUnknown() {
	s, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	provider := map[string]string{} // the card network's charges, by idempotency key
	engine, err := idem.New(s, &idem.Options{
		Reconcile: func(ctx context.Context, rec idem.Record) (idem.Resolution, error) {
			if id, ok := provider[rec.Key]; ok {
				return idem.Resolution{Verdict: idem.VerdictCompleted, Result: idem.Result{Body: []byte(id)}}, nil
			}
			return idem.Resolution{Verdict: idem.VerdictNotExecuted}, nil
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	cut := true
	charge := func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
		provider["msg-7"] = fmt.Sprintf("ch_%d", len(provider)+1)
		if cut {
			return nil, idem.OutcomeUnknown(errors.New("connection reset after the request was sent"),
				"the charge was sent and no answer came back")
		}
		return []byte(provider["msg-7"]), nil
	}
	msg := idem.Request{Tenant: "acme", Key: "msg-7", Fingerprint: "charge 12.00 EUR"}
	_, _, err = engine.Do(ctx, msg, charge)
	fmt.Println("delivery 1:", err, errors.Is(err, idem.ErrOutcomeUnknown))
	cut = false
	out, replayed, err := engine.Do(ctx, msg, charge)
	fmt.Printf("delivery 2: %s replayed=%t err=%v charges=%d\n", out, replayed, err, len(provider))
	// Output:
	// delivery 1: idem: outcome unknown: key "msg-7" is UNKNOWN (the charge was sent and no answer came back): connection reset after the request was sent true
	// delivery 2: ch_1 replayed=true err=<nil> charges=1
}
