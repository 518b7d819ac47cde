// Package ctxtime holds the one wait that honours a context, shared by the
// retrying client, the probe, the lab and the engine's reconcile sweep. It
// imports only the standard library, as the engine does.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits for d, or until ctx is done, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
