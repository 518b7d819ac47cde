package idemgrpc_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store"
)

// completePanics is a store whose Complete panics: a bug in recording the
// answer, after the handler ran.
type completePanics struct{ store.Store }

func (completePanics) Complete(context.Context, store.CompleteParams) error { panic("store bug") }

// Issue 31, item 2, for the interceptor: a panic after the handler
// answered (in the status policy, in the store's Complete) went up into
// grpc-go, which does not recover it: the process died with the key
// PROCESSING. Now a panicking policy leaves the answer stored and
// returned, and a panic before the answer was recorded turns the key
// UNKNOWN; either way the lease is over (its renewal stopped) and the
// server keeps serving.
func TestPanicAfterTheHandlerEndsTheKey(t *testing.T) {
	for _, tt := range []struct {
		name   string
		policy func(codes.Code) idemgrpc.Disposition
		store  func(store.Store) store.Store
		stored bool // the answer is stored and returned; else UNKNOWN
		state  store.State
	}{
		{name: "status policy", policy: func(codes.Code) idemgrpc.Disposition { panic("policy bug") }, stored: true, state: store.StateCompleted},
		{name: "the store's Complete", store: func(s store.Store) store.Store { return completePanics{s} }, state: store.StateUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			ms := memStore(t)
			s := ms
			if tt.store != nil {
				s = tt.store(ms)
			}
			leases := make(chan *idem.Lease, 4)
			svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				l, _ := idem.LeaseFromContext(ctx)
				leases <- l
				return pay(ctx, in)
			}}
			conn := serve(t, newEngine(t, s, nil), &idemgrpc.Options{AllowAnonymous: true, StatusPolicy: tt.policy}, svc)
			got, _, err := charge(ctx, conn, "k", "1")
			if tt.stored && (err != nil || got != "paid 1") {
				t.Fatalf("the call = %q, %v; want its answer", got, err)
			}
			if !tt.stored {
				wantStatus(t, err, codes.Internal, idemgrpc.ReasonOutcomeUnknown)
			}
			l := <-leases
			if err := l.Context().Err(); err == nil || errors.Is(context.Cause(l.Context()), idem.ErrLeaseExpired) {
				t.Errorf("the lease's context after the call: %v; want it ended by its finalize (renewal stopped)", err)
			}
			if rec, err := ms.Get(ctx, store.ID{Key: "k"}); err != nil || rec.State != tt.state {
				t.Fatalf("the key after the panic: %v %v; want %v", rec.State, err, tt.state)
			}
			got, replayed, err := charge(ctx, conn, "k", "1")
			if tt.stored && (err != nil || got != "paid 1" || !replayed) {
				t.Fatalf("the retry = %q replayed %v, %v; want the answer replayed", got, replayed, err)
			}
			if !tt.stored {
				wantStatus(t, err, codes.Unknown, idemgrpc.ReasonOutcomeUnknown)
			}
			if c := svc.calls.Load(); c != 1 {
				t.Fatalf("the handler ran %d times", c)
			}
		})
	}
}
