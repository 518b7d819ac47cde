package idemgrpc

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem/store"
)

// FuzzDecodeResult: whatever a store hands back, a replay decodes it or
// answers INTERNAL NOT_REPLAYABLE; it never panics.
func FuzzDecodeResult(f *testing.F) {
	ok, _ := EncodeResult(wrapperspb.String("paid"), nil)
	failed, _ := EncodeResult(nil, status.Error(codes.Internal, "ledger"))
	f.Add(ok.Status, ok.Body)
	f.Add(failed.Status, failed.Body)
	f.Add(0, []byte("google.protobuf.Nope\n\x0a\x01x"))
	f.Add(0, []byte("no newline"))
	f.Fuzz(func(t *testing.T, code int, body []byte) {
		resp, err := decodeResult(&store.Result{Status: code, Body: body})
		if (resp == nil) == (err == nil) {
			t.Fatalf("decodeResult gave %v and %v", resp, err)
		}
		if err != nil {
			if st, _ := status.FromError(err); code == int(codes.OK) && ErrorInfo(st) != ReasonNotReplayable {
				t.Fatalf("an OK record that does not decode answered %v", err)
			}
		}
	})
}
