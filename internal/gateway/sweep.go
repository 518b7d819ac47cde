package gateway

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
)

// sweep reconciles every UNKNOWN key each ReconcileEvery, so that keys no
// client comes back for are settled too, until ctx ends. The engine bounds
// the lookups (ReconcileRate, ReconcileConcurrency) and backs off the keys
// whose lookup failed; each pass logs one line, not one per key.
func (g *Gateway) sweep(ctx context.Context) {
	t := time.NewTicker(g.cfg.ReconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := g.engine.ReconcileAll(ctx)
		logSweep(ctx, g.cfg.Logger, st, err)
	}
}

// logSweep writes the one line of a pass: a warning when lookups failed
// or the store stopped the pass, else what it settled; nothing when it
// asked about nothing.
func logSweep(ctx context.Context, log *slog.Logger, st idem.ReconcileStats, err error) {
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil // the gateway is stopping
	}
	level, msg := slog.LevelInfo, "idem: reconcile sweep"
	switch {
	case err != nil:
		level, msg = slog.LevelWarn, "idem: reconcile sweep stopped by the store; the next pass starts over"
	case st.Failed > 0:
		level, msg = slog.LevelWarn, "idem: reconcile sweep: lookups failed; those keys stay UNKNOWN and are asked again after a backoff"
	case st.Completed+st.NotExecuted+st.Unknown+st.Skipped == 0:
		level = slog.LevelDebug // nothing asked: none UNKNOWN, or all backing off
	}
	if !log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.Int("completed", st.Completed), slog.Int("not_executed", st.NotExecuted),
		slog.Int("unknown", st.Unknown), slog.Int("failed", st.Failed), slog.Int("skipped", st.Skipped),
		slog.Int("backed_off", st.BackedOff)}
	if st.FirstError != nil {
		attrs = append(attrs, slog.String("first_error", st.FirstError.Error()))
	}
	if err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	log.LogAttrs(ctx, level, msg, attrs...)
}
