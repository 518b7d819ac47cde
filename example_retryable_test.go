package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// A message consumer decides from Do's answer whether to acknowledge a
// message, have it redelivered later, drop it, or alert someone: Retryable
// is the redeliver-or-not question, and an unknown outcome is the one
// that needs a person or a reconciliation.
func ExampleRetryable() {
	s, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	engine, err := idem.New(s, nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	handle := func(msgID, payload string, charge func() error) string {
		key := idem.Request{Tenant: "billing", Key: msgID, Fingerprint: payload}
		_, _, err := engine.Do(ctx, key, func(ctx context.Context, l *idem.Lease) ([]byte, error) {
			if err := l.Check(); err != nil { // just before the side effect
				return nil, idem.NotRun(err) // nothing was charged: release the key
			}
			return []byte("charged"), charge()
		})
		switch {
		case err == nil:
			return "ack"
		case idem.Retryable(err):
			return "redeliver later: " + err.Error()
		case errors.Is(err, idem.ErrOutcomeUnknown):
			unknown, _ := errors.AsType[*idem.OutcomeUnknownError](err)
			return "ack, and alert: it may have been charged: " + unknown.Record.Reason
		}
		return "drop: " + err.Error()
	}

	ok := func() error { return nil }
	fmt.Println(handle("m1", "42 EUR", func() error { return idem.NotRun(errors.New("card network down, nothing sent")) }))
	fmt.Println(handle("m1", "42 EUR", ok))
	fmt.Println(handle("m1", "42 EUR", ok)) // a redelivery: replayed, not charged again
	fmt.Println(handle("m1", "99 EUR", ok)) // the same ID with another payload
	fmt.Println(handle("m2", "7 EUR", func() error {
		return idem.OutcomeUnknown(errors.New("no answer in 10s"), "no answer from the card network")
	}))
	fmt.Println(handle("m2", "7 EUR", ok)) // it may have been charged: never run again unasked
	// Output:
	// redeliver later: card network down, nothing sent
	// ack
	// ack
	// drop: idem: key reused with a different request
	// ack, and alert: it may have been charged: no answer from the card network
	// ack, and alert: it may have been charged: no answer from the card network
}
