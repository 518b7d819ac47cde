package idemgrpc_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemgrpc"
)

// stepThenAborted is a handler that makes one downstream step through
// down (its key derived from the handler's scope by the client
// interceptor) and answers ABORTED, as a handler does whose own
// transaction aborted after the step charged.
func stepThenAborted(down *grpc.ClientConn) *service {
	return &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		down.Invoke(idemclient.WithStep(ctx, "charge"), chargeMethod, in, new(wrapperspb.StringValue))
		return nil, status.Error(codes.Aborted, "the transaction aborted")
	}}
}

// ABORTED after a downstream step was sent does not prove that nothing
// took effect: DefaultStatusPolicy's release turns the key UNKNOWN, and a
// retry gets UNKNOWN OUTCOME_UNKNOWN without running the handler again.
func TestAbortedAfterSentStepIsUnknown(t *testing.T) {
	ctx := testContext(t)
	r, down := downstream(t, nil)
	svc := stepThenAborted(down)
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
	_, _, err := charge(ctx, conn, "k", "1")
	wantStatus(t, err, codes.Aborted, "")
	_, _, err = charge(ctx, conn, "k", "1")
	st := wantStatus(t, err, codes.Unknown, idemgrpc.ReasonOutcomeUnknown)
	if !strings.Contains(st.Message(), "status Aborted after a downstream step was sent") {
		t.Errorf("retry's message %q; want the reason", st.Message())
	}
	if n, keys := svc.calls.Load(), r.seen(); n != 1 || len(keys) != 1 {
		t.Fatalf("the handler ran %d times, the downstream got %d calls; want 1 and 1", n, len(keys))
	}
}

// A step that provably never left (its dial refused: grpc-go had no
// stream for it) had no effect: ABORTED releases the key as before.
func TestAbortedAfterUnsentStepReleases(t *testing.T) {
	ctx := testContext(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the dial is refused
	ci, err := idemgrpc.NewClientInterceptor(&idemgrpc.ClientOptions{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	down, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(ci))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { down.Close() })
	svc := stepThenAborted(down)
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
	for range 2 {
		_, _, err := charge(ctx, conn, "k", "1")
		wantStatus(t, err, codes.Aborted, "")
	}
	if n := svc.calls.Load(); n != 2 {
		t.Fatalf("the handler ran %d times; want 2 (released)", n)
	}
}
