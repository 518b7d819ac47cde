package idemgrpc_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store/memstore"
)

// A service defined without generated code: one unary method taking and
// returning a google.protobuf.StringValue. Generated services work the
// same way.
var refunds = grpc.ServiceDesc{
	ServiceName: "shop.Refunds",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Refund", Handler: func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
		req := new(wrapperspb.StringValue)
		if err := dec(req); err != nil {
			return nil, err
		}
		refund := srv.(func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error))
		return in(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/shop.Refunds/Refund"},
			func(ctx context.Context, req any) (any, error) { return refund(ctx, req.(*wrapperspb.StringValue)) })
	}}},
}

func Example() {
	store, _ := memstore.New(nil)
	engine, _ := idem.New(store, nil)
	server, _ := idemgrpc.NewServerInterceptor(engine, &idemgrpc.Options{
		// Scope keys per caller; here every call says who it is in metadata.
		Tenant: func(ctx context.Context) (string, error) {
			if v := metadata.ValueFromIncomingContext(ctx, "account"); len(v) == 1 {
				return v[0], nil
			}
			return "", idemgrpc.ErrTenantMissing
		},
	})
	var refunded atomic.Int64
	srv := grpc.NewServer(grpc.UnaryInterceptor(server))
	srv.RegisterService(&refunds, func(ctx context.Context, order *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		lease, _ := idem.LeaseFromContext(ctx) // pass lease.Fence() with the side effect
		refunded.Add(1)
		return wrapperspb.String(fmt.Sprintf("refunded %s (fenced: %v)", order.GetValue(), lease.Fence() > 0)), nil
	})
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	client, _ := idemgrpc.NewClientInterceptor(nil)
	conn, _ := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(client))
	defer conn.Close()

	// One logical call, sent twice with its key (say, after a timeout).
	ctx := idemgrpc.WithKey(metadata.AppendToOutgoingContext(context.Background(), "account", "acme"), "refund-42")
	for range 2 {
		out := new(wrapperspb.StringValue)
		var trailer metadata.MD
		if err := conn.Invoke(ctx, "/shop.Refunds/Refund", wrapperspb.String("order 42"), out, grpc.Trailer(&trailer)); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s, replayed: %v\n", out.GetValue(), idemgrpc.Replayed(trailer))
	}
	fmt.Println("refunds made:", refunded.Load())
	// Output:
	// refunded order 42 (fenced: true), replayed: false
	// refunded order 42 (fenced: true), replayed: true
	// refunds made: 1
}
