package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// TestHandlerPassingOnAReleasedDoKeepsTheKey: the handler charges, then
// an Engine.Do of its own for a sub-step releases that step's key (its
// work said NotRun), and the handler returns Do's error wrapped. The mark
// spoke for the sub-step: the handler's key is not released, and the
// retry does not charge again. It used to be released.
func TestHandlerPassingOnAReleasedDoKeepsTheKey(t *testing.T) {
	ctx := testContext(t)
	e := newEngine(t, memStore(t), nil)
	var charges atomic.Int32
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		charges.Add(1) // the effect
		_, _, err := e.Do(ctx, idem.Request{Tenant: "acme", Key: "receipt-" + in.GetValue(), NoFingerprint: true},
			func(context.Context, *idem.Lease) ([]byte, error) {
				return nil, idem.NotRun(errors.New("mailer: connection refused"))
			})
		if err != nil {
			return nil, fmt.Errorf("send receipt: %w", err)
		}
		return pay(ctx, in)
	}}
	conn := serve(t, e, nil, svc)
	for call := range 2 {
		if _, _, err := charge(ctx, conn, "k", "1"); err == nil {
			t.Fatalf("call %d succeeded; want the handler's error", call+1)
		}
	}
	if n := charges.Load(); n != 1 {
		t.Fatalf("the handler charged %d times; want 1: its key was released after the charge", n)
	}
	if rec, err := e.Get(ctx, store.ID{Key: "k"}); err != nil {
		t.Fatalf("the handler's key: %+v, %v; want it kept", rec, err)
	}
}
