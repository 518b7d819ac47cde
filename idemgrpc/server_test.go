package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/internal/faultproxy"
	"github.com/idemkit/idem/store"
)

// wantStatus fails t unless err is a status with code and, when reason is
// set, the idem ErrorInfo reason.
func wantStatus(t *testing.T, err error, code codes.Code, reason string) *status.Status {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("got %v, want code %v", err, code)
	}
	if got := idemgrpc.ErrorInfo(st); got != reason {
		t.Fatalf("got reason %q, want %q (%v)", got, reason, err)
	}
	return st
}

func TestReplay(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := testContext(t)
		svc := &service{}
		conn := serve(t, newEngine(t, st, nil), nil, svc)
		got, replayed, err := charge(ctx, conn, "k1", "100 EUR")
		if err != nil || got != "paid 100 EUR" || replayed {
			t.Fatalf("first call: %q replayed=%v err=%v", got, replayed, err)
		}
		for range 3 {
			got, replayed, err = charge(ctx, conn, "k1", "100 EUR")
			if err != nil || got != "paid 100 EUR" || !replayed {
				t.Fatalf("retry: %q replayed=%v err=%v", got, replayed, err)
			}
		}
		if n := svc.calls.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		// Another key runs again, and a call without a key passes through.
		if _, replayed, err = charge(ctx, conn, "k2", "100 EUR"); err != nil || replayed {
			t.Fatalf("other key: replayed=%v err=%v", replayed, err)
		}
		if _, replayed, err = charge(ctx, conn, "", "100 EUR"); err != nil || replayed {
			t.Fatalf("no key: replayed=%v err=%v", replayed, err)
		}
		if n := svc.calls.Load(); n != 3 {
			t.Fatalf("handler ran %d times, want 3", n)
		}
	})
}

// TestStoredError: a handler's error status, with its details, is stored
// and replayed as it was.
func TestStoredError(t *testing.T) {
	eachStore(t, testStoredError)
}

func testStoredError(t *testing.T, st store.Store) {
	ctx := testContext(t)
	svc := &service{handle: func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		s, _ := status.New(codes.Internal, "ledger write failed").WithDetails(&errdetails.ErrorInfo{Reason: "LEDGER", Domain: "example.com"})
		return nil, s.Err()
	}}
	conn := serve(t, newEngine(t, st, nil), nil, svc)
	_, replayed, err := charge(ctx, conn, "k", "1")
	first := wantStatus(t, err, codes.Internal, "")
	if replayed {
		t.Fatal("first answer marked replayed")
	}
	_, replayed, err = charge(ctx, conn, "k", "1")
	again := wantStatus(t, err, codes.Internal, "")
	if !replayed || !proto.Equal(first.Proto(), again.Proto()) {
		t.Fatalf("replay %v (replayed=%v), want %v", again.Proto(), replayed, first.Proto())
	}
	if n := svc.calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// TestStatusPolicy: ABORTED releases the key (the retry runs);
// UNAVAILABLE, RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED make it UNKNOWN
// (grpc-go makes them for downstream calls that may have run), unless the
// handler marks its error idem.NotRun; and a handler's SetDisposition
// overrides the policy.
func TestStatusPolicy(t *testing.T) {
	for _, tc := range []struct {
		code      codes.Code
		disp      idemgrpc.Disposition // set by the handler, when not zero
		plain     error                // returned by the handler instead of a status, when set
		wantCalls int64
		wantCode  codes.Code
		reason    string
	}{
		{code: codes.Unavailable, wantCalls: 1, wantCode: codes.Unknown, reason: idemgrpc.ReasonOutcomeUnknown},
		{code: codes.ResourceExhausted, wantCalls: 1, wantCode: codes.Unknown, reason: idemgrpc.ReasonOutcomeUnknown},
		{code: codes.Unavailable, plain: idem.NotRun(status.Error(codes.Unavailable, "shedding load")), wantCalls: 2, wantCode: codes.OK},
		{code: codes.ResourceExhausted, plain: idem.NotRun(status.Error(codes.ResourceExhausted, "over quota")), wantCalls: 2, wantCode: codes.OK},
		{code: codes.Aborted, wantCalls: 2, wantCode: codes.OK},
		{code: codes.Internal, wantCalls: 1, wantCode: codes.Internal},
		{code: codes.Unknown, wantCalls: 1, wantCode: codes.Unknown},
		{code: codes.DeadlineExceeded, wantCalls: 1, wantCode: codes.Unknown, reason: idemgrpc.ReasonOutcomeUnknown},
		{code: codes.Internal, disp: idemgrpc.DispositionRelease, wantCalls: 2, wantCode: codes.OK},
		// Plain errors are judged as grpc-go answers them.
		{code: codes.DeadlineExceeded, plain: context.DeadlineExceeded, wantCalls: 1, wantCode: codes.Unknown, reason: idemgrpc.ReasonOutcomeUnknown},
		{code: codes.Unknown, plain: errors.New("card declined"), wantCalls: 1, wantCode: codes.Unknown},
		{code: codes.OK, disp: idemgrpc.DispositionUnknown, wantCalls: 1, wantCode: codes.Unknown, reason: idemgrpc.ReasonOutcomeUnknown},
	} {
		t.Run(tc.code.String()+"/"+tc.disp.String()+"/"+fmt.Sprint(tc.plain), func(t *testing.T) {
			ctx := testContext(t)
			svc := &service{}
			svc.handle = func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				if svc.calls.Load() > 1 {
					return pay(ctx, in)
				}
				if tc.disp != 0 && !idemgrpc.SetDisposition(ctx, tc.disp, "declared by the handler") {
					t.Error("SetDisposition refused in a protected handler")
				}
				if tc.code == codes.OK {
					return pay(ctx, in)
				}
				if tc.plain != nil {
					return nil, tc.plain
				}
				return nil, status.Error(tc.code, "first try fails")
			}
			conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
			charge(ctx, conn, "k", "1")
			_, _, err := charge(ctx, conn, "k", "1")
			wantStatus(t, err, tc.wantCode, tc.reason)
			if n := svc.calls.Load(); n != tc.wantCalls {
				t.Fatalf("handler ran %d times, want %d", n, tc.wantCalls)
			}
		})
	}
}

// TestBurst: 100 calls with one key at once run the handler once; every
// other call is answered ABORTED with a RetryInfo of at least 1ms and at
// most the lease, and a later call replays.
func TestBurst(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		ctx := testContext(t)
		release := make(chan struct{})
		svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			<-release
			return pay(ctx, in)
		}}
		const lease = 30 * time.Second
		conn := serve(t, newEngine(t, st, &idem.Options{LeaseDuration: lease}), nil, svc)
		const n = 100
		var wg sync.WaitGroup
		var mu sync.Mutex
		aborted, ok := 0, 0
		for range n {
			wg.Go(func() {
				got, _, err := charge(ctx, conn, "burst", "7")
				mu.Lock()
				defer mu.Unlock()
				switch status.Code(err) {
				case codes.OK:
					if got != "paid 7" {
						t.Errorf("got %q", got)
					}
					ok++
				case codes.Aborted:
					s, _ := status.FromError(err)
					d, has := idemgrpc.RetryDelay(s)
					if !has || d < time.Millisecond || d > lease || idemgrpc.ErrorInfo(s) != idemgrpc.ReasonKeyInFlight {
						t.Errorf("in flight answered %v with RetryInfo %v (%v)", err, d, has)
					}
					aborted++
					if aborted == n-1 {
						close(release) // every other call has been answered: let the one running finish
					}
				default:
					t.Errorf("unexpected answer %v", err)
				}
			})
		}
		wg.Wait()
		if ok != 1 || aborted != n-1 {
			t.Fatalf("%d calls answered OK and %d ABORTED, want 1 and %d", ok, aborted, n-1)
		}
		if got, replayed, err := charge(ctx, conn, "burst", "7"); err != nil || got != "paid 7" || !replayed {
			t.Fatalf("after the burst: %q replayed=%v err=%v", got, replayed, err)
		}
		if c := svc.calls.Load(); c != 1 {
			t.Fatalf("handler ran %d times, want 1", c)
		}
	})
}

// TestBurstClient: 100 logical calls sharing one key through the client
// interceptor all end with the one answer, after one execution: the
// interceptor retries ABORTED after the server's RetryInfo.
func TestBurstClient(t *testing.T) {
	ctx := testContext(t)
	st := newFaultStore(memStore(t), make(chan struct{}, 256))
	release := make(chan struct{})
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		<-release
		return pay(ctx, in)
	}}
	go func() {
		<-st.acquired // the call that runs
		<-st.acquired // another, answered ABORTED: it will wait the RetryInfo
		close(release)
	}()
	ci, err := idemgrpc.NewClientInterceptor(&idemgrpc.ClientOptions{MaxAttempts: 20})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, newEngine(t, st, nil), nil, svc, grpc.WithUnaryInterceptor(ci))
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			out := new(wrapperspb.StringValue)
			if err := conn.Invoke(idemgrpc.WithKey(ctx, "shared"), chargeMethod, wrapperspb.String("3"), out); err != nil || out.GetValue() != "paid 3" {
				t.Errorf("got %q, %v", out.GetValue(), err)
			}
		})
	}
	wg.Wait()
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
	if n := st.acquires(); n < 101 {
		t.Fatalf("%d acquires for 100 calls: none was retried", n)
	}
}

func TestMismatch(t *testing.T) {
	ctx := testContext(t)
	svc := &service{}
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
	if _, _, err := charge(ctx, conn, "k", "100 EUR"); err != nil {
		t.Fatal(err)
	}
	_, _, err := charge(ctx, conn, "k", "999 EUR")
	wantStatus(t, err, codes.FailedPrecondition, idemgrpc.ReasonKeyMismatch)
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// TestStoreDown: an unreachable store answers UNAVAILABLE and the handler
// does not run; the client interceptor's retry, with the same key, runs
// it once the store is back.
func TestStoreDown(t *testing.T) {
	ctx := testContext(t)
	st := newFaultStore(memStore(t), nil)
	st.failAcquires(2) // the engine asks twice before it gives up
	svc := &service{}
	conn := serve(t, newEngine(t, st, nil), nil, svc)
	_, _, err := charge(ctx, conn, "k", "1")
	s := wantStatus(t, err, codes.Unavailable, idemgrpc.ReasonStoreUnavailable)
	if d, ok := idemgrpc.RetryDelay(s); !ok || d <= 0 {
		t.Fatalf("no RetryInfo on %v", err)
	}
	if c := svc.calls.Load(); c != 0 {
		t.Fatalf("handler ran %d times with the store down", c)
	}

	st.failAcquires(2)
	ci, err := idemgrpc.NewClientInterceptor(nil)
	if err != nil {
		t.Fatal(err)
	}
	retrying := serve(t, newEngine(t, st, nil), nil, svc, grpc.WithUnaryInterceptor(ci))
	out := new(wrapperspb.StringValue)
	if err := retrying.Invoke(ctx, chargeMethod, wrapperspb.String("1"), out); err != nil || out.GetValue() != "paid 1" {
		t.Fatalf("retried call: %q, %v", out.GetValue(), err)
	}
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// TestPanic: a panicking handler is answered INTERNAL (OUTCOME_UNKNOWN),
// the server keeps serving, and the key is UNKNOWN: a retry does not run
// it and gets UNKNOWN, which the client interceptor returns as an
// *OutcomeUnknownError without retrying.
func TestPanic(t *testing.T) {
	eachStore(t, testPanic)
}

func testPanic(t *testing.T, st store.Store) {
	ctx := testContext(t)
	svc := &service{}
	svc.handle = func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if in.GetValue() == "boom" {
			panic("charged, then crashed")
		}
		return pay(ctx, in)
	}
	ci, err := idemgrpc.NewClientInterceptor(nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, newEngine(t, st, nil), nil, svc, grpc.WithUnaryInterceptor(ci))
	_, _, err = charge(ctx, conn, "k", "boom")
	var unknown *idemgrpc.OutcomeUnknownError
	if !errors.As(err, &unknown) || !errors.Is(err, idem.ErrOutcomeUnknown) || unknown.Key != "k" {
		t.Fatalf("panic answered %v, want an *OutcomeUnknownError", err)
	}
	wantStatus(t, err, codes.Internal, idemgrpc.ReasonOutcomeUnknown)
	if got, _, err := charge(ctx, conn, "other", "1"); err != nil || got != "paid 1" {
		t.Fatalf("server after the panic: %q, %v", got, err)
	}
	_, _, err = charge(ctx, conn, "k", "boom")
	s := wantStatus(t, err, codes.Unknown, idemgrpc.ReasonOutcomeUnknown)
	if !strings.Contains(s.Message(), "panicked") {
		t.Fatalf("message %q does not say why", s.Message())
	}
	if c := svc.calls.Load(); c != 2 {
		t.Fatalf("handler ran %d times, want 2 (the panic and the other key)", c)
	}
}

// TestOutcomeUnknownError: a handler error wrapping idem.ErrOutcomeUnknown
// makes the key UNKNOWN; the caller and its retry both learn so.
func TestOutcomeUnknownError(t *testing.T) {
	ctx := testContext(t)
	svc := &service{handle: func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, idem.OutcomeUnknown(errors.New("provider timed out"), "")
	}}
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
	for range 2 {
		_, _, err := charge(ctx, conn, "k", "1")
		wantStatus(t, err, codes.Unknown, idemgrpc.ReasonOutcomeUnknown)
	}
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// secretErr is what a provider call's error looks like: its URL holds an
// API key and an internal address.
var secretErr = &url.Error{Op: "Post", URL: "https://10.0.3.7:8443/v1/charges?api_key=sk_live_4eC39HqLyjWDarjtT1zdp7dc",
	Err: errors.New("read: connection reset by peer")}

// leaks reports whether s holds any part of secretErr that no caller may see.
func leaks(s string) bool {
	return strings.Contains(s, "sk_live") || strings.Contains(s, "10.0.3.7") || strings.Contains(s, "api_key")
}

// TestOutcomeUnknownReasonHoldsNoSecret (issue 32 item 4): a service built
// as docs/library.md's idemgrpc snippet, whose handler's provider call failed
// with an error whose text holds an API key and an internal address. The
// error's text used to be the key's reason, sent to the caller in the
// status and to every retry: now neither the caller, nor the retry, nor
// the store's record holds any of it, and a reason the handler chose is
// what they see.
func TestOutcomeUnknownReasonHoldsNoSecret(t *testing.T) {
	ctx := testContext(t)
	for _, tc := range []struct{ name, reason, want string }{
		{"no reason given", "", "the handler returned an outcome-unknown error"},
		{"the handler's reason", "the charge was sent and no answer came back", "the charge was sent and no answer came back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &service{handle: func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				return nil, idem.OutcomeUnknown(secretErr, tc.reason)
			}}
			st := memStore(t)
			e := newEngine(t, st, nil)
			conn := serve(t, e, &idemgrpc.Options{Tenant: func(context.Context) (string, error) { return "acme", nil }}, svc)
			for call := range 2 {
				_, _, err := charge(ctx, conn, "k", "1")
				s := wantStatus(t, err, codes.Unknown, idemgrpc.ReasonOutcomeUnknown)
				seen := fmt.Sprint(s.Message(), s.Details())
				if leaks(seen) || !strings.Contains(seen, tc.want) {
					t.Errorf("call %d got %q; want the reason %q and nothing of the provider's error", call+1, seen, tc.want)
				}
			}
			rec, err := e.Get(ctx, store.ID{Tenant: "acme", Key: "k"})
			if err != nil || rec.State != store.StateUnknown || rec.Reason != tc.want {
				t.Fatalf("record = %+v, %v; want UNKNOWN with the reason %q", rec, err, tc.want)
			}
		})
	}
}

// TestNotRunReleasesTheKey: a handler error wrapped with idem.NotRun says
// the work stopped before its effect: the key is released, the caller
// gets the error's status, and the retry runs the handler.
func TestNotRunReleasesTheKey(t *testing.T) {
	ctx := testContext(t)
	var refused atomic.Bool
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if !refused.Swap(true) {
			return nil, idem.NotRun(status.Error(codes.FailedPrecondition, "the card network refused the request before charging"))
		}
		return pay(ctx, in)
	}}
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
	if _, _, err := charge(ctx, conn, "k", "1"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("first call = %v; want the handler's FAILED_PRECONDITION", err)
	}
	if got, replayed, err := charge(ctx, conn, "k", "1"); err != nil || replayed || got != "paid 1" {
		t.Fatalf("retry = %q, %t, %v; want the handler run again", got, replayed, err)
	}
}

// TestClientDeadline: the caller's deadline is shorter than the handler;
// the work still completes, once, and the retry with the same key gets
// its answer replayed.
func TestClientDeadline(t *testing.T) {
	ctx := testContext(t)
	started, release, finished := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		close(started)
		<-release
		finished <- ctx.Err() // the handler's context outlives the caller's deadline
		return pay(ctx, in)
	}}
	ci, err := idemgrpc.NewClientInterceptor(&idemgrpc.ClientOptions{MaxAttempts: 30})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc, grpc.WithUnaryInterceptor(ci))
	short, cancel := context.WithTimeout(idemgrpc.WithKey(ctx, "slow"), 200*time.Millisecond)
	defer cancel()
	err = conn.Invoke(short, chargeMethod, wrapperspb.String("5"), new(wrapperspb.StringValue))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("short call: %v, want DEADLINE_EXCEEDED", err)
	}
	<-started
	close(release)
	if err := <-finished; err != nil {
		t.Fatalf("the handler's context ended with the caller's deadline: %v", err)
	}
	out := new(wrapperspb.StringValue)
	var trailer metadata.MD
	if err := conn.Invoke(idemgrpc.WithKey(ctx, "slow"), chargeMethod, wrapperspb.String("5"), out, grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if out.GetValue() != "paid 5" || !idemgrpc.Replayed(trailer) {
		t.Fatalf("retry: %q replayed=%v", out.GetValue(), idemgrpc.Replayed(trailer))
	}
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// TestBadInput: invalid keys, a missing key where one is required, and a
// missing or invalid tenant are refused before the handler runs.
func TestBadInput(t *testing.T) {
	ctx := testContext(t)
	svc := &service{}
	tenantOf := func(ctx context.Context) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("tenant"); len(v) == 1 {
			return v[0], nil
		}
		return "", idemgrpc.ErrTenantMissing
	}
	conn := serve(t, newEngine(t, memStore(t), nil), &idemgrpc.Options{RequireKey: true, Tenant: tenantOf}, svc)
	withTenant := metadata.AppendToOutgoingContext(ctx, "tenant", "acme")
	_, _, err := charge(withTenant, conn, "", "1")
	wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonKeyRequired)
	_, _, err = charge(withTenant, conn, strings.Repeat("k", 256), "1")
	wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid)
	twice := metadata.AppendToOutgoingContext(withTenant, idemgrpc.MetadataKey, "a")
	_, _, err = charge(twice, conn, "b", "1")
	wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid)
	_, _, err = charge(ctx, conn, "k", "1")
	wantStatus(t, err, codes.Unauthenticated, idemgrpc.ReasonTenantMissing)
	_, _, err = charge(metadata.AppendToOutgoingContext(ctx, "tenant", strings.Repeat("t", 300)), conn, "k", "1")
	wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonTenantInvalid)
	if c := svc.calls.Load(); c != 0 {
		t.Fatalf("handler ran %d times on bad input", c)
	}
	// Two tenants never share a key.
	for _, tenant := range []string{"acme", "globex", "acme"} {
		if _, _, err := charge(metadata.AppendToOutgoingContext(ctx, "tenant", tenant), conn, "k", "1"); err != nil {
			t.Fatal(err)
		}
	}
	if c := svc.calls.Load(); c != 2 {
		t.Fatalf("handler ran %d times for two tenants, want 2", c)
	}
	if _, err := idemgrpc.NewServerInterceptor(newEngine(t, memStore(t), nil), nil); err == nil {
		t.Fatal("no Tenant and no AllowAnonymous accepted")
	}
}

// TestKeyField: with KeyField, the key comes from a field of the request
// (AIP-155's request_id; here the only field of a StringValue), and a
// metadata key that disagrees with it is refused.
func TestKeyField(t *testing.T) {
	ctx := testContext(t)
	svc := &service{}
	conn := serve(t, newEngine(t, memStore(t), nil), &idemgrpc.Options{AllowAnonymous: true, KeyField: "value"}, svc)
	for range 2 {
		if _, _, err := charge(ctx, conn, "", "req-1"); err != nil {
			t.Fatal(err)
		}
	}
	if _, replayed, err := charge(ctx, conn, "req-1", "req-1"); err != nil || !replayed {
		t.Fatalf("same key in both places: replayed=%v err=%v", replayed, err)
	}
	_, _, err := charge(ctx, conn, "other", "req-1")
	wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid)
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// TestLeaseInHandler: the handler finds its lease and fence in its
// context.
func TestLeaseInHandler(t *testing.T) {
	ctx := testContext(t)
	fences := make(chan int64, 2)
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		l, ok := idem.LeaseFromContext(ctx)
		if !ok || l.Check() != nil {
			return nil, status.Error(codes.FailedPrecondition, "no lease")
		}
		fences <- l.Fence()
		idemgrpc.SetDisposition(ctx, idemgrpc.DispositionRelease, "")
		return pay(ctx, in)
	}}
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
	for range 2 {
		if _, _, err := charge(ctx, conn, "k", "1"); err != nil {
			t.Fatal(err)
		}
	}
	if f1, f2 := <-fences, <-fences; f1 <= 0 || f2 <= f1 {
		t.Fatalf("fences %d then %d, want increasing", f1, f2)
	}
}

// TestServiceConfigRetry: a gRPC service config retry policy resends the
// call's metadata, so its retries carry the key the client interceptor
// attached; the server's pushback trailer paces them.
func TestServiceConfigRetry(t *testing.T) {
	ctx := testContext(t)
	st := newFaultStore(memStore(t), nil)
	st.failAcquires(2) // the first attempt finds the store down
	svc := &service{}
	ci, err := idemgrpc.NewClientInterceptor(&idemgrpc.ClientOptions{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	const config = `{"methodConfig": [{"name": [{"service": "idemtest.Payments"}], "retryPolicy": {
		"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2,
		"retryableStatusCodes": ["UNAVAILABLE", "ABORTED"]}}]}`
	conn := serve(t, newEngine(t, st, nil), nil, svc, grpc.WithUnaryInterceptor(ci), grpc.WithDefaultServiceConfig(config))
	out := new(wrapperspb.StringValue)
	if err := conn.Invoke(ctx, chargeMethod, wrapperspb.String("9"), out); err != nil || out.GetValue() != "paid 9" {
		t.Fatalf("got %q, %v", out.GetValue(), err)
	}
	st.mu.Lock()
	keys := st.keys
	st.mu.Unlock()
	if len(keys) != 3 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Fatalf("acquires with keys %q, want 3 with one key", keys)
	}
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// TestClientUnknownBounded: an outcome-unknown answer with a RetryInfo is
// retried only up to MaxAttempts, then returned as an
// *OutcomeUnknownError; without RetryInfo it is not retried at all.
func TestClientUnknownBounded(t *testing.T) {
	for _, tc := range []struct {
		after        time.Duration
		wantAcquires int
	}{{after: 10 * time.Millisecond, wantAcquires: 1 + 3}, {after: 0, wantAcquires: 1 + 1}} {
		t.Run(tc.after.String(), func(t *testing.T) {
			ctx := testContext(t)
			st := newFaultStore(memStore(t), nil)
			svc := &service{handle: func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
				return nil, idem.OutcomeUnknown(errors.New("provider timed out"), "")
			}}
			ci, err := idemgrpc.NewClientInterceptor(&idemgrpc.ClientOptions{MaxAttempts: 3})
			if err != nil {
				t.Fatal(err)
			}
			conn := serve(t, newEngine(t, st, nil), &idemgrpc.Options{AllowAnonymous: true, UnknownRetryAfter: tc.after}, svc, grpc.WithUnaryInterceptor(ci))
			charge(ctx, conn, "k", "1") // marks the key UNKNOWN
			_, _, err = charge(ctx, conn, "k", "1")
			var unknown *idemgrpc.OutcomeUnknownError
			if !errors.As(err, &unknown) || unknown.Status.Code() != codes.Unknown {
				t.Fatalf("got %v, want an *OutcomeUnknownError", err)
			}
			if n := st.acquires(); n != tc.wantAcquires {
				t.Fatalf("%d acquires, want %d", n, tc.wantAcquires)
			}
			if c := svc.calls.Load(); c != 1 {
				t.Fatalf("handler ran %d times, want 1", c)
			}
		})
	}
}

// TestPerAttemptTimeout: one logical call whose first attempt is cut off
// by PerAttemptTimeout while the handler runs; the retry, with the same
// key, finds it in flight, waits the RetryInfo and gets the replay.
func TestPerAttemptTimeout(t *testing.T) {
	ctx := testContext(t)
	st := newFaultStore(memStore(t), make(chan struct{}, 16))
	release := make(chan struct{})
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		<-release
		return pay(ctx, in)
	}}
	ci, err := idemgrpc.NewClientInterceptor(&idemgrpc.ClientOptions{MaxAttempts: 30, PerAttemptTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, newEngine(t, st, nil), nil, svc, grpc.WithUnaryInterceptor(ci))
	go func() {
		<-st.acquired // the first attempt runs the handler
		<-st.acquired // the second found it in flight
		close(release)
	}()
	out := new(wrapperspb.StringValue)
	var trailer metadata.MD
	if err := conn.Invoke(ctx, chargeMethod, wrapperspb.String("4"), out, grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if out.GetValue() != "paid 4" || !idemgrpc.Replayed(trailer) {
		t.Fatalf("got %q replayed=%v", out.GetValue(), idemgrpc.Replayed(trailer))
	}
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// TestDeterministicFingerprint: a request with a map, built in another
// order each time, fingerprints the same (protobuf's deterministic
// encoding sorts map entries), so the retries replay rather than mismatch,
// and the replayed Struct decodes whole.
func TestDeterministicFingerprint(t *testing.T) {
	ctx := metadata.AppendToOutgoingContext(testContext(t), idemgrpc.MetadataKey, "order-1")
	svc := &service{}
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
	var first *structpb.Struct
	for i := range 5 {
		in := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for j := range 32 { // Go randomises map iteration: the encoding order differs
			k := (j*7 + i*5) % 32
			in.Fields["item"+strconv.Itoa(k)] = structpb.NewNumberValue(float64(k))
		}
		out := new(structpb.Struct)
		var trailer metadata.MD
		if err := conn.Invoke(ctx, orderMethod, in, out, grpc.Trailer(&trailer)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if i == 0 {
			first = out
		} else if !idemgrpc.Replayed(trailer) || !proto.Equal(out, first) {
			t.Fatalf("call %d: replayed=%v, %v", i, idemgrpc.Replayed(trailer), out)
		}
	}
	if c := svc.calls.Load(); c != 1 || first.Fields["status"].GetStringValue() != "ordered" || len(first.Fields) != 33 {
		t.Fatalf("handler ran %d times; answer %v", c, first)
	}
}

func TestOptions(t *testing.T) {
	e := newEngine(t, memStore(t), nil)
	for _, o := range []*idemgrpc.Options{
		nil,
		{AllowAnonymous: true, LeaseDuration: -1},
		{AllowAnonymous: true, LeaseDuration: time.Microsecond},
		{AllowAnonymous: true, Retention: time.Microsecond},
		{AllowAnonymous: true, LeaseDuration: store.MaxDuration + time.Millisecond},
		{AllowAnonymous: true, Retention: store.MaxDuration + time.Millisecond},
		{AllowAnonymous: true, UnknownRetryAfter: -time.Second},
		{AllowAnonymous: true, KeyField: "request-id"},
	} {
		if _, err := idemgrpc.NewServerInterceptor(e, o); err == nil {
			t.Errorf("NewServerInterceptor accepted %+v", o)
		}
	}
	if _, err := idemgrpc.NewServerInterceptor(nil, &idemgrpc.Options{AllowAnonymous: true}); err == nil {
		t.Error("NewServerInterceptor accepted a nil engine")
	}
	for _, o := range []*idemgrpc.ClientOptions{{MaxAttempts: -1}, {BaseDelay: -1}, {MaxDelay: -1}, {PerAttemptTimeout: -1}, {KeyField: "request-id"}} {
		if _, err := idemgrpc.NewClientInterceptor(o); err == nil {
			t.Errorf("NewClientInterceptor accepted %+v", o)
		}
	}
}

// TestRequestID: AIP-155. With KeyField "request_id", a request's own
// request_id is its key: a retry of the same request replays, another
// request_id runs, and another request under a used request_id is a
// mismatch. Requests without a request_id pass through.
func TestRequestID(t *testing.T) {
	ctx := testContext(t)
	svc := &service{}
	conn := serve(t, newEngine(t, memStore(t), nil), &idemgrpc.Options{AllowAnonymous: true, KeyField: "request_id"}, svc)
	refund := func(id string, amount int64) (string, bool, error) {
		out := new(wrapperspb.StringValue)
		var trailer metadata.MD
		err := conn.Invoke(ctx, refundMethod, newRefund(id, amount), out, grpc.Trailer(&trailer))
		return out.GetValue(), idemgrpc.Replayed(trailer), err
	}
	const id = "8f7c1c2e-5a43-4d0e-9a51-1b2f0c3d4e5f"
	for i := range 3 {
		got, replayed, err := refund(id, 250)
		if err != nil || got != "refunded 250" || replayed != (i > 0) {
			t.Fatalf("call %d: %q replayed=%v err=%v", i, got, replayed, err)
		}
	}
	_, _, err := refund(id, 999)
	wantStatus(t, err, codes.FailedPrecondition, idemgrpc.ReasonKeyMismatch)
	if _, replayed, err := refund("", 250); err != nil || replayed {
		t.Fatalf("no request_id: replayed=%v err=%v", replayed, err)
	}
	if c := svc.calls.Load(); c != 2 {
		t.Fatalf("handler ran %d times, want 2", c)
	}
}

// TestConnectionCut: the connection is cut while the handler runs, after
// the request reached the server (the client cannot know whether it
// took effect). The client interceptor retries with the same key on a new
// connection, finds the call in flight, waits its RetryInfo and gets the
// replay; the handler ran once, to completion.
func TestConnectionCut(t *testing.T) {
	ctx := testContext(t)
	st := newFaultStore(memStore(t), make(chan struct{}, 64))
	started, release := make(chan struct{}), make(chan struct{})
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		close(started)
		<-release
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return pay(ctx, in)
	}}
	direct := serve(t, newEngine(t, st, nil), nil, svc)
	proxy, err := faultproxy.New(direct.Target())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	ci, err := idemgrpc.NewClientInterceptor(&idemgrpc.ClientOptions{MaxAttempts: 30})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(proxy.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(ci))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		<-started
		proxy.CutAll() // the request is in, its answer will never come back on this connection
		<-st.acquired  // the first attempt's
		<-st.acquired  // a retry's, which found the call in flight or could not connect yet
		close(release)
	}()
	out := new(wrapperspb.StringValue)
	var trailer metadata.MD
	if err := conn.Invoke(ctx, chargeMethod, wrapperspb.String("8"), out, grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if out.GetValue() != "paid 8" || !idemgrpc.Replayed(trailer) {
		t.Fatalf("got %q replayed=%v", out.GetValue(), idemgrpc.Replayed(trailer))
	}
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// TestReconcile: a key left UNKNOWN is settled by the engine's Reconcile
// with an answer encoded by EncodeResult; the retry gets it replayed and
// the handler does not run again.
func TestReconcile(t *testing.T) {
	ctx := testContext(t)
	svc := &service{handle: func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, idem.OutcomeUnknown(errors.New("provider timed out"), "")
	}}
	e := newEngine(t, memStore(t), &idem.Options{Reconcile: func(ctx context.Context, rec store.Record) (idem.Resolution, error) {
		res, err := idemgrpc.EncodeResult(wrapperspb.String("paid 6 (found at the provider)"), nil)
		return idem.Resolution{Verdict: idem.VerdictCompleted, Result: res}, err
	}})
	conn := serve(t, e, nil, svc)
	_, _, err := charge(ctx, conn, "k", "6")
	wantStatus(t, err, codes.Unknown, idemgrpc.ReasonOutcomeUnknown)
	got, replayed, err := charge(ctx, conn, "k", "6")
	if err != nil || got != "paid 6 (found at the provider)" || !replayed {
		t.Fatalf("after reconciliation: %q replayed=%v err=%v", got, replayed, err)
	}
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
	if _, err := idemgrpc.EncodeResult(nil, nil); err == nil {
		t.Fatal("EncodeResult accepted no message and no error")
	}
}

// TestMethods: only the methods named in Options.Methods are protected.
func TestMethods(t *testing.T) {
	ctx := testContext(t)
	svc := &service{}
	conn := serve(t, newEngine(t, memStore(t), nil), &idemgrpc.Options{AllowAnonymous: true, Methods: []string{orderMethod}}, svc)
	for range 2 {
		if _, replayed, err := charge(ctx, conn, "k", "1"); err != nil || replayed {
			t.Fatalf("unprotected method: replayed=%v err=%v", replayed, err)
		}
	}
	if c := svc.calls.Load(); c != 2 {
		t.Fatalf("handler ran %d times, want 2", c)
	}
}

// TestLeaseEnds: the handler's context is the lease's: when the lease
// ends (here: no renewal), the handler learns why, and what it answers
// then (its context's error) leaves the key UNKNOWN, never run again.
func TestLeaseEnds(t *testing.T) {
	ctx := testContext(t)
	causes := make(chan error, 1)
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}}
	e := newEngine(t, memStore(t), &idem.Options{LeaseDuration: 200 * time.Millisecond, RenewEvery: -1, Logger: quiet})
	conn := serve(t, e, nil, svc)
	_, _, err := charge(ctx, conn, "k", "1")
	wantStatus(t, err, codes.Canceled, "")
	if cause := <-causes; !errors.Is(cause, idem.ErrLeaseExpired) {
		t.Fatalf("handler's context ended by %v, want idem.ErrLeaseExpired", cause)
	}
	_, _, err = charge(ctx, conn, "k", "1")
	wantStatus(t, err, codes.Unknown, idemgrpc.ReasonOutcomeUnknown)
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// TestWaitAttaches: with Options.Wait, a call that finds its key in flight
// waits for the running call and is answered what it answered, replayed,
// instead of ABORTED; the handler runs once.
func TestWaitAttaches(t *testing.T) {
	eachStore(t, func(t *testing.T, base store.Store) {
		ctx := testContext(t)
		st := newFaultStore(base, make(chan struct{}, 2))
		release := make(chan struct{})
		svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			<-release
			return pay(ctx, in)
		}}
		conn := serve(t, newEngine(t, st, nil), &idemgrpc.Options{AllowAnonymous: true, Wait: time.Minute}, svc)
		first := make(chan error, 1)
		go func() {
			_, _, err := charge(ctx, conn, "attach", "5")
			first <- err
		}()
		<-st.acquired // the first call runs; only now is the duplicate sent
		go func() {
			<-st.acquired // the duplicate, which found the key in flight and now waits
			close(release)
		}()
		got, replayed, err := charge(ctx, conn, "attach", "5")
		if err != nil || got != "paid 5" {
			t.Fatalf("the duplicate got %q, %v; want the first call's answer", got, err)
		}
		if err := <-first; err != nil {
			t.Fatalf("the first call: %v", err)
		}
		if !replayed && st.acquires() != 2 {
			t.Fatalf("the duplicate was not a replay (%d acquires)", st.acquires())
		}
		if c := svc.calls.Load(); c != 1 {
			t.Fatalf("handler ran %d times, want 1", c)
		}
	})
}

// TestWaitEnds: a duplicate whose Wait runs out while the first call
// still runs is answered ABORTED with the pushback, as without Wait.
func TestWaitEnds(t *testing.T) {
	ctx := testContext(t)
	st := newFaultStore(memStore(t), make(chan struct{}, 1))
	release := make(chan struct{})
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		<-release
		return pay(ctx, in)
	}}
	conn := serve(t, newEngine(t, st, nil), &idemgrpc.Options{AllowAnonymous: true, Wait: 20 * time.Millisecond}, svc)
	first := make(chan struct{})
	go func() {
		defer close(first)
		charge(ctx, conn, "held", "5")
	}()
	defer func() { close(release); <-first }() // the first call ends, then the test
	<-st.acquired
	_, _, err := charge(ctx, conn, "held", "5")
	wantStatus(t, err, codes.Aborted, idemgrpc.ReasonKeyInFlight)
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// TestClientDoublesInFlightWaits: the server's RetryInfo for a call in
// flight is the method's average duration (20ms here); the client
// interceptor waits it, then twice it, then four times it, so its 4
// attempts span at least 140ms, not 60ms, before it gives up with ABORTED.
func TestClientDoublesInFlightWaits(t *testing.T) {
	ctx := testContext(t)
	st := newFaultStore(memStore(t), make(chan struct{}, 16))
	release := make(chan struct{})
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if in.GetValue() == "warm-up" {
			time.Sleep(20 * time.Millisecond) // the method's work: its average duration becomes 20ms
		} else {
			<-release
		}
		return pay(ctx, in)
	}}
	conn := serve(t, newEngine(t, st, nil), nil, svc)
	if _, _, err := charge(ctx, conn, "warm-up", "warm-up"); err != nil {
		t.Fatal(err)
	}
	<-st.acquired
	first := make(chan error, 1)
	go func() { _, _, err := charge(ctx, conn, "slow", "7"); first <- err }()
	defer func() {
		close(release)
		if err := <-first; err != nil {
			t.Error(err)
		}
	}()
	<-st.acquired // the slow call runs
	ci, err := idemgrpc.NewClientInterceptor(&idemgrpc.ClientOptions{MaxAttempts: 4})
	if err != nil {
		t.Fatal(err)
	}
	dup, err := grpc.NewClient(conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(ci))
	if err != nil {
		t.Fatal(err)
	}
	defer dup.Close()
	start := time.Now()
	err = dup.Invoke(idemgrpc.WithKey(ctx, "slow"), chargeMethod, wrapperspb.String("7"), new(wrapperspb.StringValue))
	wantStatus(t, err, codes.Aborted, idemgrpc.ReasonKeyInFlight)
	if waited := time.Since(start); waited < 140*time.Millisecond {
		t.Fatalf("4 attempts took %v; want at least 20+40+80ms of waits", waited)
	}
}

// TestClientUnknownKeyWhenDeadlineShort: an outcome-unknown answer whose
// RetryInfo outlasts the call's deadline ends the call at once, and the
// caller still gets an *OutcomeUnknownError with the key: it used to get
// the bare status, without the key (which the interceptor may have made)
// and not matching idem.ErrOutcomeUnknown, and could only go on under a
// new key, which runs the work again.
func TestClientUnknownKeyWhenDeadlineShort(t *testing.T) {
	svc := &service{handle: func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return nil, idem.OutcomeUnknown(errors.New("provider timed out"), "")
	}}
	ci, err := idemgrpc.NewClientInterceptor(nil)
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, newEngine(t, memStore(t), nil), &idemgrpc.Options{AllowAnonymous: true, UnknownRetryAfter: 5 * time.Second}, svc, grpc.WithUnaryInterceptor(ci))
	ctx := idemgrpc.WithKey(testContext(t), "k-unknown")
	charge(ctx, conn, "", "1") // marks the key UNKNOWN
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, _, err = charge(short, conn, "", "1")
	unknown, ok := errors.AsType[*idemgrpc.OutcomeUnknownError](err)
	if !ok || unknown.Key != "k-unknown" || !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("got %v, want an *OutcomeUnknownError with the key", err)
	}
	if c := svc.calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
}

// A first attempt cut off by PerAttemptTimeout while the handler runs may
// have taken effect; when the attempts run out on the answers after it
// (ABORTED KEY_IN_FLIGHT: the first is still running), the caller gets an
// *OutcomeUnknownError with the key the interceptor made. It used to get
// the bare ABORTED, which invites a retry at a higher level under a new
// key: the work twice.
func TestClientKeepsTheKeyAfterAnAttemptCutOff(t *testing.T) {
	ctx := testContext(t)
	st := newFaultStore(memStore(t), make(chan struct{}, 16))
	release := make(chan struct{})
	defer close(release)
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		<-release
		return pay(ctx, in)
	}}
	ci, err := idemgrpc.NewClientInterceptor(&idemgrpc.ClientOptions{MaxAttempts: 2, PerAttemptTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, newEngine(t, st, nil), nil, svc, grpc.WithUnaryInterceptor(ci))
	err = conn.Invoke(ctx, chargeMethod, wrapperspb.String("4"), new(wrapperspb.StringValue))
	ue, ok := errors.AsType[*idemgrpc.OutcomeUnknownError](err)
	if !ok || ue.Key == "" || !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("err %v; want an *OutcomeUnknownError with the key", err)
	}
	if c := svc.calls.Load(); c > 1 {
		t.Fatalf("handler ran %d times, want at most 1", c)
	}
}
