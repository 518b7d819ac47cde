package idemgrpc_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/internal/faultproxy"
)

// declined is the handler's own final answer, which the idem server stores
// and replays.
func declined(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return nil, status.Error(codes.FailedPrecondition, "card declined")
}

// wantSettled fails t unless err is the bare FAILED_PRECONDITION of
// declined, replayed (as the caller's own trailer says), and the handler
// ran once.
func wantSettled(t *testing.T, err error, trailer metadata.MD, svc *service) {
	t.Helper()
	if _, ok := errors.AsType[*idemgrpc.OutcomeUnknownError](err); ok || errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("got %v, want the replayed status bare: the outcome is known", err)
	}
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || st.Message() != "card declined" {
		t.Fatalf("got %v, want the handler's FAILED_PRECONDITION", err)
	}
	if !idemgrpc.Replayed(trailer) {
		t.Fatal("the caller's trailer does not mark the answer replayed")
	}
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// An attempt's outcome is unknown to the client, and a later attempt with
// the key gets the handler's final error replayed from the store: the
// caller gets that status bare, since the outcome is known. It used to get
// an *OutcomeUnknownError, which told it to retry a call that was settled.
func TestClientReplayedAnswerSettlesAnUnknownAttempt(t *testing.T) {
	t.Run("connection dropped after send", func(t *testing.T) {
		var proxy atomic.Pointer[faultproxy.Proxy]
		svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			proxy.Load().CutAll() // the request is in; its answer never gets back
			return declined(ctx, in)
		}}
		// Wait: a retry that comes while the first is being stored gets
		// its answer, however the machine schedules them.
		e := newEngine(t, memStore(t), nil)
		p, err := faultproxy.New(serve(t, e, &idemgrpc.Options{AllowAnonymous: true, Wait: time.Minute}, svc).Target())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		proxy.Store(p)
		conn := dialThrough(t, p.Addr(), &idemgrpc.ClientOptions{MaxAttempts: 10, BaseDelay: time.Millisecond, MaxDelay: 50 * time.Millisecond})
		var trailer metadata.MD
		err = conn.Invoke(testContext(t), chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue), grpc.Trailer(&trailer))
		wantSettled(t, err, trailer, svc)
	})
	t.Run("attempt cut off", func(t *testing.T) {
		st := newFaultStore(memStore(t), make(chan struct{}, 64))
		release := make(chan struct{})
		svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			<-release
			return declined(ctx, in)
		}}
		go func() {
			<-st.acquired // the first attempt runs the handler; PerAttemptTimeout cuts it off
			<-st.acquired // a retry found it in flight
			close(release)
		}()
		conn := dialThrough(t, serve(t, newEngine(t, st, nil), nil, svc).Target(),
			&idemgrpc.ClientOptions{MaxAttempts: 30, PerAttemptTimeout: 100 * time.Millisecond})
		var trailer metadata.MD
		err := conn.Invoke(testContext(t), chargeMethod, wrapperspb.String("2"), new(wrapperspb.StringValue), grpc.Trailer(&trailer))
		wantSettled(t, err, trailer, svc)
	})
}

// Answers that do not settle the key keep the caller's key: a fresh
// answer made in front of the idem server (here an authentication layer
// that refuses the retry), which says nothing of the first attempt, and a
// replayed OUTCOME_UNKNOWN (a downstream service's, passed on and stored).
func TestClientUnsettlingAnswersKeepTheKey(t *testing.T) {
	t.Run("fresh answer after a dropped connection", func(t *testing.T) {
		var proxy atomic.Pointer[faultproxy.Proxy]
		svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			proxy.Load().CutAll()
			return pay(ctx, in)
		}}
		var calls atomic.Int64
		auth := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if calls.Add(1) > 1 { // the credentials expired after the first
				return nil, status.Error(codes.PermissionDenied, "token expired")
			}
			return handler(ctx, req)
		}
		in, err := idemgrpc.NewServerInterceptor(newEngine(t, memStore(t), nil), &idemgrpc.Options{AllowAnonymous: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		_, direct := listen(t, svc, []grpc.ServerOption{grpc.ChainUnaryInterceptor(auth, in)})
		p, err := faultproxy.New(direct.Target())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		proxy.Store(p)
		conn := dialThrough(t, p.Addr(), &idemgrpc.ClientOptions{MaxAttempts: 10, BaseDelay: time.Millisecond, MaxDelay: 50 * time.Millisecond})
		err = conn.Invoke(testContext(t), chargeMethod, wrapperspb.String("3"), new(wrapperspb.StringValue))
		wantUnknown(t, err, codes.PermissionDenied)
		if c := svc.calls.Load(); c != 1 {
			t.Fatalf("handler ran %d times, want 1", c)
		}
	})
	t.Run("replayed OUTCOME_UNKNOWN", func(t *testing.T) {
		svc := &service{handle: func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			// A downstream idem service's answer, returned as it came: a
			// plain UNKNOWN status, which the default policy stores.
			s, _ := status.New(codes.Unknown, "downstream outcome unknown").WithDetails(
				&errdetails.ErrorInfo{Reason: idemgrpc.ReasonOutcomeUnknown, Domain: idemgrpc.ErrorDomain})
			return nil, s.Err()
		}}
		conn := dialThrough(t, serve(t, newEngine(t, memStore(t), nil), nil, svc).Target(), &idemgrpc.ClientOptions{MaxAttempts: 1})
		ctx := idemgrpc.WithKey(testContext(t), "k-downstream")
		for i := range 2 { // the second is a replay
			var trailer metadata.MD
			err := conn.Invoke(ctx, chargeMethod, wrapperspb.String("4"), new(wrapperspb.StringValue), grpc.Trailer(&trailer))
			wantUnknown(t, err, codes.Unknown)
			if replayed := idemgrpc.Replayed(trailer); replayed != (i == 1) {
				t.Fatalf("call %d: replayed=%v", i+1, replayed)
			}
		}
		if c := svc.calls.Load(); c != 1 {
			t.Fatalf("handler ran %d times, want 1", c)
		}
	})
}
