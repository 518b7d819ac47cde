package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// errDeclined is a failure that provably charged nothing.
var errDeclined = errors.New("card declined, nothing charged")

// cardProvider stands in for a payment provider. It declines the first
// charge without taking any money. Given the lease's fence with every
// charge, it refuses a fence lower than one it has seen for the order, so
// an owner whose lease was taken over cannot charge.
type cardProvider struct {
	declineNext bool
	fences      map[string]int64 // order -> highest fence seen
	charges     int
}

func (p *cardProvider) Charge(ctx context.Context, order string, cents int, fence int64) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if fence < p.fences[order] {
		return "", errors.New("stale fence, refused")
	}
	p.fences[order] = fence
	if p.declineNext {
		p.declineNext = false
		return "", errDeclined
	}
	p.charges++
	return fmt.Sprintf("ch_%d", p.charges), nil
}

// Begin, step by step: the attempt that acquires the key checks its lease
// right before the side effect, passes the fence on, and then completes
// the key with the result, or releases it when nothing was charged, so a
// retry may charge. Every later attempt gets the stored result.
func ExampleEngine_Begin() {
	s, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	engine, err := idem.New(s, nil)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	provider := &cardProvider{declineNext: true, fences: map[string]int64{}}
	req := idem.Request{Tenant: "acme", Key: "order-42", Fingerprint: "POST /payments amount=4200"}

	pay := func() {
		att, err := engine.Begin(ctx, req)
		if err != nil {
			fmt.Println("not started:", err) // nothing is held and nothing ran
			return
		}
		switch att.Outcome {
		case idem.Acquired:
			lease := att.Lease
			defer lease.Close() // a panic or a path that records nothing: UNKNOWN, never a second charge
			// Just before the side effect: a pause (GC, a stalled call) may
			// have outlived the lease, and another attempt may hold the key.
			if err := lease.Check(); err != nil {
				lease.Release(ctx) // nothing was charged
				fmt.Println("lease ended before the charge:", err)
				return
			}
			dup, _ := engine.Begin(ctx, req) // a duplicate arriving meanwhile
			fmt.Println("duplicate:", dup.Outcome)

			chargeID, err := provider.Charge(lease.Context(), req.Key, 4200, lease.Fence())
			switch {
			case errors.Is(err, errDeclined):
				// Provably nothing charged: a retry may run the charge.
				lease.Release(ctx)
				fmt.Println("declined; key released")
				return
			case err != nil:
				// Unknown whether it charged: never run it again until
				// it is reconciled. The reason is shown to retries: no
				// error text in it.
				lease.MarkUnknown(ctx, "the charge was sent and no answer came back")
				return
			}
			if err := lease.Complete(ctx, idem.Result{Status: 201, Body: []byte(chargeID)}); err != nil {
				fmt.Println("charged, but the result was not stored:", err)
				return
			}
			fmt.Println("charged", chargeID)
		case idem.Replayed:
			fmt.Printf("replayed: %d %s\n", att.Result.Status, att.Result.Body)
		case idem.InFlight:
			fmt.Println("in flight; retry after", att.RetryAfter)
		case idem.Mismatch:
			fmt.Println("the key was used for another request")
		}
	}
	pay() // declined
	pay() // the client's retry
	pay() // and another
	fmt.Println("charges:", provider.charges)
	// Output:
	// duplicate: in_flight
	// declined; key released
	// duplicate: in_flight
	// charged ch_1
	// replayed: 201 ch_1
	// charges: 1
}
