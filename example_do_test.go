package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// A message consumer charges a card once per message, however often the
// broker delivers it. The first delivery fails before the card network is
// reached, so nothing was charged: Do releases the key and the next
// delivery runs the work. After that, every delivery gets the stored
// output back without running it, and the key used for another request is
// refused.
func ExampleEngine_Do() {
	store, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	engine, err := idem.New(store, nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	charges, reachable := 0, false
	charge := func(ctx context.Context, lease *idem.Lease) ([]byte, error) {
		if err := lease.Check(); err != nil { // just before the side effect
			return nil, idem.NotRun(err) // nothing was charged: release the key
		}
		if !reachable {
			// Nothing was sent: say so, or the key turns UNKNOWN.
			return nil, idem.NotRun(errors.New("card network unreachable, nothing charged"))
		}
		charges++
		return fmt.Appendf(nil, "ch_%d", charges), nil
	}
	msg := idem.Request{Tenant: "acme", Key: "msg-42", Fingerprint: "charge 42.00 EUR to card 4242"}
	for delivery := 1; delivery <= 3; delivery++ {
		out, replayed, err := engine.Do(ctx, msg, charge)
		fmt.Printf("delivery %d: %s replayed=%t err=%v\n", delivery, out, replayed, err)
		reachable = true
	}

	other := msg
	other.Fingerprint = "charge 99.00 EUR to card 4242"
	_, _, err = engine.Do(ctx, other, charge)
	fmt.Println(errors.Is(err, idem.ErrMismatch), "charges:", charges)
	// Output:
	// delivery 1:  replayed=false err=card network unreachable, nothing charged
	// delivery 2: ch_1 replayed=false err=<nil>
	// delivery 3: ch_1 replayed=true err=<nil>
	// true charges: 1
}
