package idemgrpc_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// chargeMethod is the one method of the test service, defined by hand
// over well-known types so that the tests need no generated code.
const chargeMethod = "/idemtest.Payments/Charge"

// service is the test service: handle does the work, calls counts how
// often it ran.
type service struct {
	calls  atomic.Int64
	handle func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

var paymentsDesc = grpc.ServiceDesc{
	ServiceName: "idemtest.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Charge", Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*service)
		h := func(ctx context.Context, req any) (any, error) {
			s.calls.Add(1)
			return s.handle(ctx, req.(*wrapperspb.StringValue))
		}
		if interceptor == nil {
			return h(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, h)
	}}, {MethodName: "Order", Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(structpb.Struct)
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*service)
		h := func(ctx context.Context, req any) (any, error) {
			s.calls.Add(1)
			out := proto.Clone(req.(*structpb.Struct)).(*structpb.Struct)
			out.Fields["status"] = structpb.NewStringValue("ordered")
			return out, nil
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: orderMethod}, h)
	}}, {MethodName: "Refund", Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := dynamicpb.NewMessage(refundRequest)
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*service)
		h := func(ctx context.Context, req any) (any, error) {
			s.calls.Add(1)
			m := req.(*dynamicpb.Message)
			return wrapperspb.String(fmt.Sprintf("refunded %d", m.Get(refundRequest.Fields().ByName("amount")).Int())), nil
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: refundMethod}, h)
	}}},
}

// refundMethod takes an AIP-155 request, idemtest.RefundRequest {string
// request_id = 1; int64 amount = 2;}, a message built at run time (no
// generated code), and answers a StringValue.
const refundMethod = "/idemtest.Payments/Refund"

var refundRequest = func() protoreflect.MessageDescriptor {
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("idemtest/refund.proto"), Package: proto.String("idemtest"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("RefundRequest"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("request_id"), JsonName: proto.String("requestId"), Number: proto.Int32(1),
					Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()},
				{Name: proto.String("amount"), JsonName: proto.String("amount"), Number: proto.Int32(2),
					Type: descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()},
			},
		}},
	}, nil)
	if err != nil {
		panic(err)
	}
	return fd.Messages().Get(0)
}()

// newRefund builds a RefundRequest.
func newRefund(requestID string, amount int64) *dynamicpb.Message {
	m := dynamicpb.NewMessage(refundRequest)
	m.Set(refundRequest.Fields().ByName("request_id"), protoreflect.ValueOfString(requestID))
	m.Set(refundRequest.Fields().ByName("amount"), protoreflect.ValueOfInt64(amount))
	return m
}

// orderMethod echoes a google.protobuf.Struct (a map) with "status" set.
const orderMethod = "/idemtest.Payments/Order"

// pay is the default work: it answers "paid <value>".
func pay(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String("paid " + in.GetValue()), nil
}

// serve starts a gRPC server on loopback TCP with the interceptor on e
// (none when e is nil) and returns a connection to it; both end with t.
func serve(t testing.TB, e *idem.Engine, o *idemgrpc.Options, s *service, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	var opts []grpc.ServerOption
	if e != nil {
		if o == nil {
			o = &idemgrpc.Options{AllowAnonymous: true}
		}
		if o.Logger == nil {
			o.Logger = quiet
		}
		in, err := idemgrpc.NewServerInterceptor(e, o)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, grpc.UnaryInterceptor(in))
	}
	_, conn := listen(t, s, opts, dial...)
	return conn
}

// listen serves s (pay when it has no handler) with opts on loopback TCP
// and returns the server, which the caller may stop, and a connection to
// it; both end with t.
func listen(t testing.TB, s *service, opts []grpc.ServerOption, dial ...grpc.DialOption) (*grpc.Server, *grpc.ClientConn) {
	t.Helper()
	if s.handle == nil {
		s.handle = pay
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&paymentsDesc, s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return srv, conn
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newEngine(t testing.TB, s store.Store, o *idem.Options) *idem.Engine {
	t.Helper()
	e, err := idem.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func memStore(t testing.TB) store.Store {
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// eachStore runs f on each store, in real time: the server's goroutines
// wait on the network, which a synctest bubble does not count as blocked.
var eachStore = storekit.EachStoreRealTime

// charge calls the test method with key in the metadata ("" sends none)
// and returns the answer's value, the error and whether it was replayed.
func charge(ctx context.Context, conn *grpc.ClientConn, key, value string) (string, bool, error) {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, key)
	}
	out := new(wrapperspb.StringValue)
	var trailer metadata.MD
	err := conn.Invoke(ctx, chargeMethod, wrapperspb.String(value), out, grpc.Trailer(&trailer))
	return out.GetValue(), idemgrpc.Replayed(trailer), err
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// faultStore is a real store that fails the calls storekit.Faulty is told
// to (failAcquires: the next n Acquire calls, as an unreachable store's
// would) and records the key of every Acquire.
type faultStore struct {
	storekit.Faulty

	mu   sync.Mutex
	keys []string // guarded by mu: the key of every Acquire

	acquired chan struct{} // when set, told of every Acquire while its buffer has room
}

func newFaultStore(s store.Store, acquired chan struct{}) *faultStore {
	return &faultStore{Faulty: storekit.Faulty{Store: s}, acquired: acquired}
}

func (s *faultStore) failAcquires(n int) { s.FailNext(storekit.OpAcquire, n) }

func (s *faultStore) acquires() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

func (s *faultStore) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	s.mu.Lock()
	s.keys = append(s.keys, p.Key)
	s.mu.Unlock()
	if s.acquired != nil {
		defer func() {
			select {
			case s.acquired <- struct{}{}:
			default: // nobody counts that far: never block a call
			}
		}()
	}
	return s.Faulty.Acquire(ctx, p)
}
