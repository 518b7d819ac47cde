package idemgrpc_test

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem/idemgrpc"
)

// TestKeyedCallOfAnotherCodecIsRefused: a call whose request is not a
// protobuf message (a JSON codec, golang/protobuf v1 or gogo types)
// cannot be fingerprinted nor its answer stored. With a key it used to
// run unprotected, every retry again; it is refused without running. A
// call without a key still passes through.
func TestKeyedCallOfAnotherCodecIsRefused(t *testing.T) {
	in, err := idemgrpc.NewServerInterceptor(newEngine(t, memStore(t), nil), &idemgrpc.Options{AllowAnonymous: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	handler := func(ctx context.Context, req any) (any, error) {
		runs++
		return "charged", nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/json.Payments/Charge"}
	type chargeRequest struct{ Amount int }
	keyed := metadata.NewIncomingContext(context.Background(), metadata.Pairs(idemgrpc.MetadataKey, "k"))
	for range 2 {
		_, err := in(keyed, &chargeRequest{Amount: 5}, info, handler)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("keyed call of another codec: %v, want INVALID_ARGUMENT", err)
		}
	}
	if runs != 0 {
		t.Fatalf("the handler ran %d times for keyed calls it could not protect, want 0", runs)
	}
	if _, err := in(context.Background(), &chargeRequest{Amount: 5}, info, handler); err != nil || runs != 1 {
		t.Fatalf("call without a key: %v after %d runs, want it passed through", err, runs)
	}
}
