package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// provider stands in for a payment provider. It refuses a charge whose
// fence is below one it has seen for the order (an owner whose lease was
// taken over cannot charge), and fails the next charge with next, if set.
type provider struct {
	fences  map[string]int64
	charged int
	next    error
}

func (p *provider) Charge(ctx context.Context, order string, cents int, fence int64) (string, error) {
	if fence < p.fences[order] {
		return "", errors.New("stale fence: refused")
	}
	p.fences[order] = fence
	if err := p.next; err != nil {
		p.next = nil
		return "", err
	}
	p.charged++
	return fmt.Sprintf("ch_%d (%d cents)", p.charged, cents), nil
}

// charge charges an order once, however often it is asked: every decision
// of Engine.Begin, and what the holder of the lease does about its side
// effect. (Engine.Do does all of this for a function.)
func charge(ctx context.Context, engine *idem.Engine, pay *provider, order string, cents int) (string, error) {
	att, err := engine.Begin(ctx, idem.Request{Tenant: "shop", Key: order, Fingerprint: fmt.Sprint("charge ", cents)})
	if err != nil {
		return "", err // the store failed: nothing ran, the client may retry
	}
	switch att.Outcome {
	case idem.Replayed:
		return string(att.Result.Body) + ", replayed", nil
	case idem.InFlight:
		return "", fmt.Errorf("in flight: ask again in %v", att.RetryAfter)
	case idem.Mismatch:
		return "", errors.New("the order's key was used for another amount")
	case idem.Unknown:
		return "", fmt.Errorf("an earlier attempt may have charged (%s): not charging again", att.Record.Reason)
	}
	l := att.Lease
	defer l.Close()                   // a panic or a path that says nothing: UNKNOWN, never a second charge
	if err := l.Check(); err != nil { // just before the side effect
		l.Release(ctx) // nothing was charged
		return "", err
	}
	receipt, err := pay.Charge(l.Context(), order, cents, l.Fence())
	switch {
	case errors.Is(err, idem.ErrOutcomeUnknown):
		// Sent, and no answer came back: it may have charged, and a
		// release would let a retry charge again.
		// The reason is shown to retrying clients: words of our own,
		// never the error's text.
		l.MarkUnknown(ctx, "the charge was sent and no answer came back")
		return "", err
	case err != nil:
		l.Release(ctx) // declined: nothing was charged, a retry may charge
		return "", err
	}
	// Complete, Release and MarkUnknown do not end with ctx: the outcome
	// is recorded even if the caller has gone.
	if err := l.Complete(ctx, idem.Result{Body: []byte(receipt)}); err != nil {
		return receipt, err // charged, but another owner has the key now
	}
	return receipt, nil
}

// A payment handler on the engine, step by step: a declined charge is
// released and retried, a charge is replayed to every retry, a key reused
// for another amount is refused, and a charge whose answer was lost is
// never made again unasked.
func Example() {
	s, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	engine, err := idem.New(s, nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	pay := &provider{fences: map[string]int64{}}
	try := func(order string, cents int) {
		receipt, err := charge(ctx, engine, pay, order, cents)
		if err != nil {
			fmt.Printf("%s: %v\n", order, err)
			return
		}
		fmt.Printf("%s: %s\n", order, receipt)
	}

	pay.next = errors.New("card declined")
	try("order-1", 4200)
	try("order-1", 4200)
	try("order-1", 4200)
	try("order-1", 9900)

	pay.next = idem.OutcomeUnknown(errors.New("no answer in 10s"), "")
	try("order-2", 700)
	try("order-2", 700)
	fmt.Println("charges made:", pay.charged)
	// Output:
	// order-1: card declined
	// order-1: ch_1 (4200 cents)
	// order-1: ch_1 (4200 cents), replayed
	// order-1: the order's key was used for another amount
	// order-2: outcome unknown: no answer in 10s
	// order-2: an earlier attempt may have charged (the charge was sent and no answer came back): not charging again
	// charges made: 1
}
