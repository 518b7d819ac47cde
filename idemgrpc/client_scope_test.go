package idemgrpc_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemgrpc"
)

// keyRecorder is a downstream service without the server interceptor
// that records the idempotency key of every call it receives ("" for
// none).
type keyRecorder struct {
	service
	mu   sync.Mutex
	keys []string
}

func newKeyRecorder() *keyRecorder {
	r := &keyRecorder{}
	r.handle = func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		r.mu.Lock()
		r.keys = append(r.keys, append(md.Get(idemgrpc.MetadataKey), "")[0])
		r.mu.Unlock()
		return pay(ctx, in)
	}
	return r
}

func (r *keyRecorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys)
}

// downstream serves a keyRecorder and returns it with a connection to it
// through the client interceptor with o.
func downstream(t *testing.T, o *idemgrpc.ClientOptions) (*keyRecorder, *grpc.ClientConn) {
	t.Helper()
	ci, err := idemgrpc.NewClientInterceptor(o)
	if err != nil {
		t.Fatal(err)
	}
	r := newKeyRecorder()
	_, conn := listen(t, &r.service, nil, grpc.WithUnaryInterceptor(ci))
	return r, conn
}

// callTwice makes the same call twice with ctx, as two runs of a handler
// would, and fails t on an error.
func callTwice(t *testing.T, ctx context.Context, conn *grpc.ClientConn) {
	t.Helper()
	for range 2 {
		if err := conn.Invoke(ctx, chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
	}
}

// Under a scope, a call without a key gets the key Propagator derives
// from its step, the same on every run. It used to get a random key, new
// on each run of the handler, and a run taken over or repeated did the
// downstream work again.
func TestClientUnderScopeSendsTheStepKey(t *testing.T) {
	r, conn := downstream(t, nil)
	ctx := idemclient.WithStep(idemclient.WithScope(testContext(t), "acme", "order-42"), "charge")
	callTwice(t, ctx, conn)
	want := idemclient.StepKey("acme", "order-42", "charge")
	if keys := r.seen(); len(keys) != 2 || keys[0] != want || keys[1] != want {
		t.Fatalf("downstream received keys %q; want %q twice", keys, want)
	}
}

// The same under a real lease: the work Engine.Do runs, with no
// WithScope of its own.
func TestClientUnderALeaseSendsTheStepKey(t *testing.T) {
	r, conn := downstream(t, nil)
	engine := newEngine(t, memStore(t), nil)
	_, _, err := engine.Do(testContext(t), idem.Request{Tenant: "acme", Key: "job-7", NoFingerprint: true}, func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
		callTwice(t, idemclient.WithStep(ctx, "charge"), conn)
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := idemclient.StepKey("acme", "job-7", "charge")
	if keys := r.seen(); len(keys) != 2 || keys[0] != want || keys[1] != want {
		t.Fatalf("downstream received keys %q; want %q twice", keys, want)
	}
}

// A handler behind the server interceptor runs twice (its first answer
// released the key): its downstream call carries the same key both times.
func TestClientInAHandlerRunTwiceSendsOneKey(t *testing.T) {
	ctx := testContext(t)
	r, down := downstream(t, nil)
	svc := &service{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		out := new(wrapperspb.StringValue)
		if err := down.Invoke(idemclient.WithStep(ctx, "charge"), chargeMethod, in, out); err != nil {
			return nil, err
		}
		idemgrpc.SetDisposition(ctx, idemgrpc.DispositionRelease, "")
		return out, nil
	}}
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
	for range 2 {
		if _, replayed, err := charge(ctx, conn, "order-42", "1"); err != nil || replayed {
			t.Fatalf("replayed=%v err=%v", replayed, err)
		}
	}
	want := idemclient.StepKey("", "order-42", "charge") // AllowAnonymous: the tenant ""
	if keys := r.seen(); len(keys) != 2 || keys[0] != want || keys[1] != want {
		t.Fatalf("downstream received keys %q; want %q twice", keys, want)
	}
}

// Under a scope, a call without a key whose context names no step is not
// sent: a random key would be new on each run. Its error matches
// ErrNoStep and reads as INVALID_ARGUMENT. A key the caller gave needs no
// step, and a method the interceptor does not cover passes through.
func TestClientUnderScopeWithoutStepRefuses(t *testing.T) {
	r, conn := downstream(t, nil)
	scoped := idemclient.WithScope(testContext(t), "acme", "order-42")
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"no step", scoped, idemclient.ErrNoStep},
		{"empty step", idemclient.WithStep(scoped, ""), idemclient.ErrNoStep},
		{"lease without step", nil, idemclient.ErrNoStep},
		{"invalid scope key", idemclient.WithStep(idemclient.WithScope(scoped, "acme", ""), "charge"), idem.ErrInvalidKey},
	} {
		call := func(ctx context.Context) error {
			return conn.Invoke(ctx, chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue))
		}
		var err error
		if tc.ctx != nil {
			err = call(tc.ctx)
		} else {
			engine := newEngine(t, memStore(t), nil)
			_, _, _ = engine.Do(testContext(t), idem.Request{Tenant: "acme", Key: "job-7", NoFingerprint: true}, func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
				err = call(ctx)
				return nil, idem.NotRun(err)
			})
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: error %v; want %v", tc.name, err, tc.want)
			continue
		}
		if c := status.Code(err); c != codes.InvalidArgument {
			t.Errorf("%s: status %v; want InvalidArgument", tc.name, c)
		}
	}
	if n := r.calls.Load(); n != 0 {
		t.Fatalf("downstream received %d calls; want none", n)
	}

	if err := conn.Invoke(idemgrpc.WithKey(scoped, "mine"), chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("WithKey under a scope without step: %v", err)
	}
	if err := conn.Invoke(metadata.AppendToOutgoingContext(scoped, idemgrpc.MetadataKey, "theirs"), chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("metadata key under a scope without step: %v", err)
	}
	r2, other := downstream(t, &idemgrpc.ClientOptions{Methods: []string{orderMethod}})
	if err := other.Invoke(scoped, chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue)); err != nil {
		t.Fatalf("method not covered, under a scope without step: %v", err)
	}
	if keys := append(r.seen(), r2.seen()...); !slices.Equal(keys, []string{"mine", "theirs", ""}) {
		t.Fatalf("downstream received keys %q; want the caller's two, then none", keys)
	}
}

// The refusal of a call that names no step carries the ErrorInfo reason
// STEP_REQUIRED in idem's domain, so a caller matches it without reading
// the message; the remedy stays in the message. It is not marked
// idem.NotRun: the handler that made the call may have had effects
// before it, so one that returns it as it is keeps its key (UNKNOWN), and
// only one that knows it did nothing before releases it, with
// idem.NotRun(err).
func TestClientStepRequiredReason(t *testing.T) {
	r, conn := downstream(t, nil)
	call := func(ctx context.Context) error {
		return conn.Invoke(ctx, chargeMethod, wrapperspb.String("1"), new(wrapperspb.StringValue))
	}
	err := call(idemclient.WithScope(testContext(t), "acme", "order-42"))
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || idemgrpc.ErrorInfo(st) != idemgrpc.ReasonStepRequired || !errors.Is(err, idemclient.ErrNoStep) {
		t.Fatalf("got %v (reason %q); want INVALID_ARGUMENT with reason %s, matching ErrNoStep", err, idemgrpc.ErrorInfo(st), idemgrpc.ReasonStepRequired)
	}
	if !strings.Contains(st.Message(), "ClientOptions.Methods") {
		t.Fatalf("message %q names no remedy", st.Message())
	}

	engine := newEngine(t, memStore(t), nil)
	req := idem.Request{Tenant: "acme", Key: "job-8", NoFingerprint: true}
	runs := 0
	for range 2 {
		_, _, err = engine.Do(testContext(t), req, func(ctx context.Context, _ *idem.Lease) ([]byte, error) {
			runs++
			return nil, call(ctx) // as it is: an effect before it may have happened
		})
	}
	if runs != 1 || !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("the work ran %d times, last error %v; want once, then the key kept UNKNOWN", runs, err)
	}
	if n := r.calls.Load(); n != 0 {
		t.Fatalf("downstream received %d calls; want none", n)
	}
}

// Outside a scope, a call without a key gets a fresh random one (or
// NewKey's): a step, if named, does not matter.
func TestClientOutsideScopeMakesAKey(t *testing.T) {
	r, conn := downstream(t, nil)
	ctx := idemclient.WithStep(testContext(t), "charge")
	callTwice(t, ctx, conn)
	if keys := r.seen(); len(keys) != 2 || len(keys[0]) != 26 || len(keys[1]) != 26 || keys[0] == keys[1] {
		t.Fatalf("downstream received keys %q; want two different random ones", keys)
	}
	r, conn = downstream(t, &idemgrpc.ClientOptions{NewKey: func() string { return "made" }})
	callTwice(t, testContext(t), conn)
	if keys := r.seen(); !slices.Equal(keys, []string{"made", "made"}) {
		t.Fatalf("downstream received keys %q; want NewKey's", keys)
	}
}
