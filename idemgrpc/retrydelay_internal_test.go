package idemgrpc

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestRetryDelayFromAServerIsBounded: whatever RetryInfo a server sends
// (a hundred years, or negative), the client waits at least nothing and at
// most MaxDelay; the doubling for a call in flight does not overflow into
// a negative wait, which would retry at once.
func TestRetryDelayFromAServerIsBounded(t *testing.T) {
	c := &client{opt: ClientOptions{MaxAttempts: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second}}
	for _, asked := range []time.Duration{100 * 365 * 24 * time.Hour, -time.Hour} {
		for attempt := 1; attempt <= 4; attempt++ {
			st, err := status.New(codes.Aborted, "in flight").WithDetails(
				&errdetails.ErrorInfo{Reason: ReasonKeyInFlight, Domain: ErrorDomain},
				&errdetails.RetryInfo{RetryDelay: durationpb.New(asked)})
			if err != nil {
				t.Fatal(err)
			}
			d, ok := c.retryable(context.Background(), st.Err(), attempt)
			if !ok || d < 0 || d > c.opt.MaxDelay {
				t.Errorf("RetryInfo %v, attempt %d: wait %v (retry %t), want within [0, %v]", asked, attempt, d, ok, c.opt.MaxDelay)
			}
		}
	}
}
