package idemgrpc_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/internal/faultproxy"
)

// dialThrough returns a connection to target through the client
// interceptor with o; it ends with t.
func dialThrough(t *testing.T, target string, o *idemgrpc.ClientOptions, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	ci, err := idemgrpc.NewClientInterceptor(o)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(target, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(ci)}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// wantUnknown fails t unless err is an *OutcomeUnknownError with a key
// that status.Code and status.FromError still read as code.
func wantUnknown(t *testing.T, err error, code codes.Code) {
	t.Helper()
	ue, ok := errors.AsType[*idemgrpc.OutcomeUnknownError](err)
	if !ok || ue.Key == "" || !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("got %v (%T), want an *OutcomeUnknownError with the key", err, err)
	}
	if st, ok := status.FromError(err); !ok || st.Code() != code || status.Code(err) != code {
		t.Fatalf("status of %v: %v, want %v", err, st.Code(), code)
	}
}

// The server receives the call, runs the handler, and the connection
// drops before its answer: the attempts end on UNAVAILABLE, and the
// caller gets the key (the work may have run) with the code it branched
// on before. It used to get the bare UNAVAILABLE, and a retry at a higher
// level made a new key and ran the work again.
func TestClientKeepsTheKeyWhenTheConnectionDropsAfterSend(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  idemgrpc.ClientOptions
	}{
		{"attempts run out", idemgrpc.ClientOptions{MaxAttempts: 2, BaseDelay: time.Millisecond}},
		{"the wait outlasts the call", idemgrpc.ClientOptions{BaseDelay: 10 * time.Second, MaxDelay: 10 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var proxy atomic.Pointer[faultproxy.Proxy]
			svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				proxy.Load().CutAll() // the request is in; its answer never gets back
				return pay(ctx, in)
			}}
			p, err := faultproxy.New(serve(t, nil, nil, svc).Target())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			proxy.Store(p)
			ctx, cancel := context.WithTimeout(testContext(t), time.Second)
			defer cancel()
			err = dialThrough(t, p.Addr(), &tc.opt).Invoke(ctx, chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue))
			wantUnknown(t, err, codes.Unavailable)
			if svc.calls.Load() == 0 {
				t.Fatal("the handler never ran")
			}
		})
	}
}

// The call's deadline passes while the server runs the handler: the key
// comes back with DEADLINE_EXCEEDED.
func TestClientKeepsTheKeyWhenTheDeadlinePassesAfterSend(t *testing.T) {
	started := make(chan struct{}, 1)
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		started <- struct{}{}
		<-ctx.Done() // the caller's deadline, propagated
		return nil, ctx.Err()
	}}
	conn := dialThrough(t, serve(t, nil, nil, svc).Target(), nil)
	ctx, cancel := context.WithTimeout(testContext(t), 200*time.Millisecond)
	defer cancel()
	err := conn.Invoke(ctx, chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue))
	wantUnknown(t, err, codes.DeadlineExceeded)
	select {
	case <-started:
	default:
		t.Fatal("the handler did not run")
	}
}

// Nothing listens: no attempt reached a server, nothing ran, and the
// caller gets the bare status, not an unknown outcome (a new key is
// safe), whether the dial fails fast or the deadline passes while the
// call waits for a connection (which used to claim an unknown outcome).
// An UNAVAILABLE in which the idem server says that the handler did not
// run is bare too.
func TestClientClaimsNoUnknownOutcomeWhenNothingWasSent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	for _, tc := range []struct {
		name string
		opts []grpc.CallOption
		code codes.Code
	}{
		{"fail fast", nil, codes.Unavailable},
		{"wait for ready", []grpc.CallOption{grpc.WaitForReady(true)}, codes.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dialThrough(t, addr, &idemgrpc.ClientOptions{MaxAttempts: 2, BaseDelay: time.Millisecond})
			ctx, cancel := context.WithTimeout(testContext(t), 200*time.Millisecond)
			defer cancel()
			err := conn.Invoke(ctx, chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue), tc.opts...)
			if _, ok := errors.AsType[*idemgrpc.OutcomeUnknownError](err); ok || status.Code(err) != tc.code {
				t.Fatalf("got %v (%T), want the bare %v", err, err, tc.code)
			}
		})
	}
	t.Run("store down", func(t *testing.T) {
		st := newFaultStore(memStore(t), nil)
		st.failAcquires(100)
		svc := &service{}
		conn := dialThrough(t, serve(t, newEngine(t, st, nil), nil, svc).Target(), &idemgrpc.ClientOptions{MaxAttempts: 2, MaxDelay: time.Millisecond})
		err := conn.Invoke(testContext(t), chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue))
		if _, ok := errors.AsType[*idemgrpc.OutcomeUnknownError](err); ok {
			t.Fatalf("got %v, want the bare status", err)
		}
		wantStatus(t, err, codes.Unavailable, idemgrpc.ReasonStoreUnavailable)
		if c := svc.calls.Load(); c != 0 {
			t.Fatalf("handler ran %d times", c)
		}
	})
}

// Under a service config retry policy, grpc-go's own earlier attempts may
// have reached a server although the last one never had a connection:
// the interceptor cannot see them, so a failed call keeps its key even
// when nothing listens.
func TestClientUnderARetryPolicyCountsEveryAttemptAsSent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	const config = `{"methodConfig": [{"name": [{"service": "idemtest.Payments"}], "retryPolicy": {
		"maxAttempts": 2, "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1,
		"retryableStatusCodes": ["UNAVAILABLE"]}}]}`
	conn := dialThrough(t, addr, &idemgrpc.ClientOptions{MaxAttempts: 1}, grpc.WithDefaultServiceConfig(config))
	err = conn.Invoke(testContext(t), chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue))
	wantUnknown(t, err, codes.Unavailable)
}

// The server runs the handler and answers more than the client's receive
// limit: grpc-go fails the call RESOURCE_EXHAUSTED on the client's side
// after the work ran, and the caller gets the key.
func TestClientKeepsTheKeyWhenTheAnswerIsTooLarge(t *testing.T) {
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String(strings.Repeat("x", 1000)), nil
	}}
	conn := dialThrough(t, serve(t, nil, nil, svc).Target(), &idemgrpc.ClientOptions{MaxAttempts: 1},
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(100)))
	err := conn.Invoke(testContext(t), chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue))
	wantUnknown(t, err, codes.ResourceExhausted)
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}

// A retry gets the stored success replayed, over the receive limit too:
// grpc-go's own RESOURCE_EXHAUSTED then comes with the replay's trailer,
// and must not settle the key, since the work ran. (Wait: the retry waits
// for the first attempt's answer to be stored, whenever it comes.)
func TestClientKeepsTheKeyWhenTheReplayIsTooLarge(t *testing.T) {
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String(strings.Repeat("x", 1000)), nil
	}}
	e := newEngine(t, memStore(t), nil)
	// The attempts, counted inside the interceptor's retries. (The
	// replay's trailer is no witness: the client fails the receive of the
	// message too large, and whether the trailer behind it was read first
	// is the machine's schedule.)
	var attempts atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		attempts.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn := dialThrough(t, serve(t, e, &idemgrpc.Options{AllowAnonymous: true, Wait: time.Minute}, svc).Target(),
		&idemgrpc.ClientOptions{MaxAttempts: 2}, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(100)), grpc.WithChainUnaryInterceptor(count))
	err := conn.Invoke(testContext(t), chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue))
	wantUnknown(t, err, codes.ResourceExhausted)
	// Two attempts and one run: the second was answered from the store,
	// a replay, which did not settle the key.
	if n := attempts.Load(); n != 2 {
		t.Fatalf("%d attempts, want 2: the test shows nothing", n)
	}
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}
