package check

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	var opts []goleak.Option
	if os.Getenv("IDEM_CHECK_EXPECT") == "violation" {
		// A mutated store (scripts/mutate.sh) refuses or garbles writes, so
		// the engine holds them and retries for its bounded time (the rest
		// of the lease, at least idem.FinalizeTimeout) after the run ends.
		opts = append(opts, goleak.IgnoreTopFunction("github.com/idemkit/idem.(*hold).retry"))
	}
	goleak.VerifyTestMain(m, opts...)
}
