package idemgrpc_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/internal/faultproxy"
)

// aip155Server serves the test service behind a counter of the calls
// that reach the server and the server interceptor with KeyField
// "request_id" on st; it returns a connection through the client
// interceptor with o, and the counter.
func aip155Server(t *testing.T, st *faultStore, o *idemgrpc.ClientOptions) (*grpc.ClientConn, *atomic.Int64) {
	t.Helper()
	si, err := idemgrpc.NewServerInterceptor(newEngine(t, st, nil), &idemgrpc.Options{AllowAnonymous: true, KeyField: "request_id", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	received := new(atomic.Int64)
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		received.Add(1)
		return h(ctx, req)
	}
	_, direct := listen(t, &service{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(count, si)})
	return dialThrough(t, direct.Target(), o), received
}

// A client that follows AIP-155 (request_id in the message) through the
// client interceptor with KeyField: the call's key is its request_id,
// which an idem server with the same KeyField reads in both places, and
// the retry after the store was down carries it too. The caller's message
// is left as it was. It used to get a made key in the metadata, and the
// server refused every such call (metadata and field differ).
func TestClientKeyFieldIsTheKey(t *testing.T) {
	ctx := testContext(t)
	st := newFaultStore(memStore(t), nil)
	st.failAcquires(1) // the first attempt finds the store down: UNAVAILABLE, retried
	conn, _ := aip155Server(t, st, &idemgrpc.ClientOptions{KeyField: "request_id", MaxDelay: 10 * time.Millisecond})
	const id = "8f7c1c2e-5a43-4d0e-9a51-1b2f0c3d4e5f"
	req := newRefund(id, 250)
	out := new(wrapperspb.StringValue)
	if err := conn.Invoke(ctx, refundMethod, req, out); err != nil || out.GetValue() != "refunded 250" {
		t.Fatalf("got %q, %v", out.GetValue(), err)
	}
	var trailer metadata.MD
	if err := conn.Invoke(ctx, refundMethod, newRefund(id, 250), out, grpc.Trailer(&trailer)); err != nil || !idemgrpc.Replayed(trailer) {
		t.Fatalf("the same request_id again: replayed=%v, %v", idemgrpc.Replayed(trailer), err)
	}
	st.mu.Lock()
	keys := slices.Clone(st.keys)
	st.mu.Unlock()
	if !slices.Equal(keys, []string{id, id, id}) {
		t.Fatalf("acquires with keys %q, want the request_id three times", keys)
	}
	if !proto.Equal(req, newRefund(id, 250)) {
		t.Fatalf("the caller's message changed: %v", req)
	}
}

// The connection drops after the server received the call, every
// attempt: the caller gets an *OutcomeUnknownError with the field's key,
// which every attempt carried. It used to carry a made key, which the
// caller's retry with its request_id would not have matched.
func TestClientKeyFieldOutcomeUnknownCarriesIt(t *testing.T) {
	var proxy atomic.Pointer[faultproxy.Proxy]
	r := newKeyRecorder()
	recordKey := r.handle
	r.handle = func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		// The key is recorded before the cut: the cut ends the client's
		// call, which then reads what the server received.
		out, err := recordKey(ctx, in)
		proxy.Load().CutAll() // the request is in; its answer never gets back
		return out, err
	}
	p, err := faultproxy.New(serve(t, nil, nil, &r.service).Target())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	proxy.Store(p)
	conn := dialThrough(t, p.Addr(), &idemgrpc.ClientOptions{KeyField: "value", MaxAttempts: 2, BaseDelay: time.Millisecond})
	err = conn.Invoke(testContext(t), chargeMethod, wrapperspb.String("req-1"), new(wrapperspb.StringValue))
	wantUnknown(t, err, codes.Unavailable)
	if ue, _ := errors.AsType[*idemgrpc.OutcomeUnknownError](err); ue.Key != "req-1" {
		t.Fatalf("OutcomeUnknownError.Key %q, want the field's %q", ue.Key, "req-1")
	}
	if keys := r.seen(); !slices.Equal(keys, []string{"req-1", "req-1"}) {
		t.Fatalf("the server received keys %q, want the field's on both attempts", keys)
	}
}

// A key of the call's own (WithKey, the metadata) equal to the field is
// sent; one that differs is refused before sending, with the status an
// idem server with KeyField answers it, instead of a round trip to learn
// so.
func TestClientKeyFieldAndAKeyOfItsOwn(t *testing.T) {
	ctx := testContext(t)
	const id = "refund-7"
	conn, received := aip155Server(t, newFaultStore(memStore(t), nil), &idemgrpc.ClientOptions{KeyField: "request_id"})
	refund := func(ctx context.Context) error {
		return conn.Invoke(ctx, refundMethod, newRefund(id, 5), new(wrapperspb.StringValue))
	}
	if err := refund(idemgrpc.WithKey(ctx, id)); err != nil {
		t.Fatalf("WithKey equal to the field: %v", err)
	}
	if err := refund(metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, id)); err != nil {
		t.Fatalf("metadata key equal to the field: %v", err)
	}
	if n := received.Load(); n != 2 {
		t.Fatalf("the server received %d calls, want 2", n)
	}
	for name, ctx := range map[string]context.Context{
		"WithKey":  idemgrpc.WithKey(ctx, "other"),
		"metadata": metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, "other"),
		"both":     metadata.AppendToOutgoingContext(idemgrpc.WithKey(ctx, id), idemgrpc.MetadataKey, "other"),
	} {
		err := refund(ctx)
		wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid)
		if !errors.Is(err, idem.ErrInvalidKey) {
			t.Errorf("%s: %v does not match idem.ErrInvalidKey", name, err)
		}
	}
	if n := received.Load(); n != 2 {
		t.Fatalf("the server received %d calls, want the 2 before: a differing key was sent", n)
	}
}

// Without KeyField the client does not read the field: it sends a made
// key, which the server with KeyField refuses as before. With KeyField, a
// request without the field, with it empty, or not a protobuf message
// gets a made key.
func TestClientKeyFieldUnsetOrAbsent(t *testing.T) {
	ctx := testContext(t)
	conn, _ := aip155Server(t, newFaultStore(memStore(t), nil), nil)
	err := conn.Invoke(ctx, refundMethod, newRefund("refund-8", 5), new(wrapperspb.StringValue))
	wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid)

	r, down := downstream(t, &idemgrpc.ClientOptions{KeyField: "request_id", NewKey: func() string { return "made" }})
	if err := down.Invoke(ctx, chargeMethod, wrapperspb.String("no request_id field"), new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	r2, down2 := downstream(t, &idemgrpc.ClientOptions{KeyField: "value", NewKey: func() string { return "made" }})
	if err := down2.Invoke(ctx, chargeMethod, wrapperspb.String(""), new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	if keys := append(r.seen(), r2.seen()...); !slices.Equal(keys, []string{"made", "made"}) {
		t.Fatalf("the server received keys %q, want made ones", keys)
	}

	ci, err := idemgrpc.NewClientInterceptor(&idemgrpc.ClientOptions{KeyField: "value", NewKey: func() string { return "made" }})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []any{"not a protobuf message", nil, (*wrapperspb.StringValue)(nil), (*dynamicpb.Message)(nil)} {
		var sent []string
		invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			md, _ := metadata.FromOutgoingContext(ctx)
			sent = md.Get(idemgrpc.MetadataKey)
			return nil
		}
		if err := ci(ctx, chargeMethod, req, nil, nil, invoker); err != nil || !slices.Equal(sent, []string{"made"}) {
			t.Fatalf("request %#v: sent keys %q, %v; want a made one", req, sent, err)
		}
	}
}

// Under an idempotency scope the field is the call's own key too: it
// comes before the derived key, and a call with it needs no step.
func TestClientKeyFieldUnderScope(t *testing.T) {
	r, conn := downstream(t, &idemgrpc.ClientOptions{KeyField: "value"})
	scoped := idemclient.WithScope(testContext(t), "acme", "order-42")
	for _, ctx := range []context.Context{scoped, idemclient.WithStep(scoped, "charge")} {
		if err := conn.Invoke(ctx, chargeMethod, wrapperspb.String("req-1"), new(wrapperspb.StringValue)); err != nil {
			t.Fatal(err)
		}
	}
	if keys := r.seen(); !slices.Equal(keys, []string{"req-1", "req-1"}) {
		t.Fatalf("the server received keys %q, want the field's twice", keys)
	}
}

// A request_id that gRPC metadata cannot carry as it is (not printable
// ASCII, which grpc-go refuses with INTERNAL; a space at an end, which the
// server refuses in metadata) is the key all the same: it goes in the
// field only, where the server with the same KeyField reads it, and a
// retry of the call finds it replayed. It used to fail before the server.
func TestClientKeyFieldMetadataCannotCarry(t *testing.T) {
	ctx := testContext(t)
	for _, id := range []string{"réf-1", " refund-9", "refund-9 "} {
		st := newFaultStore(memStore(t), nil)
		conn, received := aip155Server(t, st, &idemgrpc.ClientOptions{KeyField: "request_id"})
		out := new(wrapperspb.StringValue)
		if err := conn.Invoke(ctx, refundMethod, newRefund(id, 7), out); err != nil || out.GetValue() != "refunded 7" {
			t.Fatalf("request_id %q: got %q, %v", id, out.GetValue(), err)
		}
		var trailer metadata.MD
		if err := conn.Invoke(ctx, refundMethod, newRefund(id, 7), out, grpc.Trailer(&trailer)); err != nil || !idemgrpc.Replayed(trailer) {
			t.Fatalf("request_id %q again: replayed=%v, %v", id, idemgrpc.Replayed(trailer), err)
		}
		st.mu.Lock()
		keys := slices.Clone(st.keys)
		st.mu.Unlock()
		if !slices.Equal(keys, []string{id, id}) || received.Load() != 2 {
			t.Fatalf("request_id %q: acquires with keys %q, %d calls received; want it twice", id, keys, received.Load())
		}
	}
}
