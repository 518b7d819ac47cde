package idemgrpc_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/idemkit/idem/idemgrpc"
)

// TestKeyWithOuterSpaceIsRefused: a key that begins or ends with a space
// (grpc-go's client itself refuses a tab) is not a valid HTTP/2 field value (RFC 9113 section 8.2.1), and
// proxies trim or refuse it: the same call would reach the server as " k"
// one way and "k" the other, two keys for one call. It is refused, as
// idemhttp refuses it, and the handler does not run.
func TestKeyWithOuterSpaceIsRefused(t *testing.T) {
	ctx := testContext(t)
	svc := &service{}
	conn := serve(t, newEngine(t, memStore(t), nil), nil, svc)
	for _, key := range []string{" k", "k "} {
		_, _, err := charge(ctx, conn, key, "1")
		wantStatus(t, err, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid)
	}
	if n := svc.calls.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for keys with outer space, want 0", n)
	}
}
