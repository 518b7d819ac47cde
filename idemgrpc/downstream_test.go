package idemgrpc_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem/idemgrpc"
)

// TestDownstreamFailureAfterEffect: a handler that passes on the error of
// a downstream gRPC call, as `return nil, err` does, must not get its key
// released when grpc-go made that error after the downstream call ran:
// UNAVAILABLE when the connection broke under a call that was sent,
// RESOURCE_EXHAUSTED when the answer was over the caller's receive limit.
// The retry must not run the handler (and the downstream effect) again.
func TestDownstreamFailureAfterEffect(t *testing.T) {
	for _, tc := range []struct {
		name string
		want codes.Code // what grpc-go gives the handler's downstream call
	}{
		{"connection broken after send", codes.Unavailable},
		{"answer over the receive limit", codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			var effects atomic.Int64
			ran := make(chan struct{}, 1)
			down := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				effects.Add(1) // the downstream's side effect
				if tc.want == codes.Unavailable {
					ran <- struct{}{}
					<-ctx.Done() // the server is stopped under the call
					return nil, ctx.Err()
				}
				return wrapperspb.String(strings.Repeat("x", 64)), nil
			}}
			srv, downConn := listen(t, down, nil) // without the interceptor
			if tc.want == codes.Unavailable {
				go func() {
					<-ran
					srv.Stop()
				}()
			}
			svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				out := new(wrapperspb.StringValue)
				err := downConn.Invoke(ctx, chargeMethod, in, out, grpc.MaxCallRecvMsgSize(16))
				if err != nil {
					if c := status.Code(err); c != tc.want {
						t.Errorf("downstream call: %v, want code %v", err, tc.want)
					}
					return nil, err // passed on as it is
				}
				return out, nil
			}}
			conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
			charge(ctx, conn, "k", "1")
			charge(ctx, conn, "k", "1")
			if n := svc.calls.Load(); n != 1 {
				t.Fatalf("the handler ran %d times after its downstream call may have taken effect, want 1 (downstream effects: %d)", n, effects.Load())
			}
		})
	}
}

// TestDownstreamInFlightNotReleased: a handler that passes on the answer
// of a downstream idem service, whose call with the handler's key is
// still running there (ABORTED with KEY_IN_FLIGHT: its earlier attempt,
// cut off, runs on), must not get its own key released: that ABORTED
// does not say the work did not run, it says it is running. It used to
// release (ABORTED releases), and the retry ran the handler again, which,
// with a fresh downstream key (the client interceptor's default), runs the
// downstream effect twice.
func TestDownstreamInFlightNotReleased(t *testing.T) {
	ctx := testContext(t)
	started, finish := make(chan struct{}), make(chan struct{})
	down := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		close(started) // the downstream's side effect is under way
		<-finish
		return in, nil
	}}
	downConn := serve(t, newEngine(t, memStore(t), nil), nil, down)
	first := make(chan error, 1)
	go func() {
		_, _, err := charge(ctx, downConn, "down-k", "1")
		first <- err
	}()
	defer func() {
		close(finish)
		<-first
	}()
	<-started
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		_, _, err := charge(ctx, downConn, "down-k", in.GetValue())
		return nil, err // passed on as it is
	}}
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
	_, _, err := charge(ctx, conn, "k", "1")
	// Answered as the UNKNOWN it leaves: passed on, the ABORTED would
	// tell the caller that its own key is in flight.
	wantStatus(t, err, codes.Unknown, idemgrpc.ReasonOutcomeUnknown)
	charge(ctx, conn, "k", "1")
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times while its downstream call was in flight, want 1", n)
	}
}

// TestDownstreamNotRunAnsweredUnknown: a handler that did its work and
// then passed on a downstream idem service's STORE_UNAVAILABLE (the
// downstream call did not run; this handler's work did) leaves its key
// UNKNOWN, and answers so: passed on as it is, the caller's client would
// read "did not run" and drop the key.
func TestDownstreamNotRunAnsweredUnknown(t *testing.T) {
	ctx := testContext(t)
	downStore := newFaultStore(memStore(t), nil)
	downConn := serve(t, newEngine(t, downStore, nil), nil, &service{})
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		// the handler's own effect has happened here
		downStore.failAcquires(2) // the engine asks twice before it gives up
		_, _, err := charge(ctx, downConn, "down-k", in.GetValue())
		return nil, err // passed on as it is
	}}
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
	_, _, err := charge(ctx, conn, "k", "1")
	wantStatus(t, err, codes.Unknown, idemgrpc.ReasonOutcomeUnknown)
	charge(ctx, conn, "k", "1")
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}

// TestDownstreamNotRunKeptByTheHandler: the handler declares its outcome
// unknown (SetDisposition) and returns a downstream idem service's
// STORE_UNAVAILABLE: the caller gets the UNKNOWN, not the downstream's
// "not processed", even with a single attempt (no retry to find it).
func TestDownstreamNotRunKeptByTheHandler(t *testing.T) {
	ctx := testContext(t)
	downStore := newFaultStore(memStore(t), nil)
	downConn := serve(t, newEngine(t, downStore, nil), nil, &service{})
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		idemgrpc.SetDisposition(ctx, idemgrpc.DispositionUnknown, "the charge may have gone through")
		downStore.failAcquires(2) // the engine asks twice before it gives up
		_, _, err := charge(ctx, downConn, "down-k", in.GetValue())
		return nil, err // passed on as it is
	}}
	conn := dialThrough(t, serve(t, newEngine(t, memStore(t), nil), nil, svc).Target(), &idemgrpc.ClientOptions{MaxAttempts: 1})
	err := conn.Invoke(ctx, chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue))
	wantUnknown(t, err, codes.Unknown)
	if st, _ := status.FromError(err); !strings.Contains(st.Message(), "the charge may have gone through") {
		t.Fatalf("got %v, want the handler's own reason", err)
	}
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}
