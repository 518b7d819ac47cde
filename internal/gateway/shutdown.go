package gateway

import (
	"cmp"
	"context"
	"net/http"
	"time"

	"github.com/idemkit/idem"
)

// answerFlushTimeout bounds how long a shutdown waits, after cutting the
// requests still in flight, for their answers to be written out.
const answerFlushTimeout = time.Second

// tracked counts the request until it is finalized (the key completed,
// released or marked UNKNOWN), so that a shutdown can wait for that.
func (g *Gateway) tracked(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.inflight.Add(1)
		defer g.inflight.Done()
		if g.procs != nil {
			g.procs.begin()
			defer g.procs.end()
		}
		next.ServeHTTP(w, r)
	})
}

// abandonInFlight runs when the shutdown timeout ended with requests
// still in flight: it cuts their upstream calls (cause errShutdown), so
// that each key is marked UNKNOWN when its request may have reached the
// upstream, or released when it had not, rather than left PROCESSING
// until its lease ends; and it waits, at most idem.FinalizeTimeout, for
// those marks to be stored.
func (g *Gateway) abandonInFlight() {
	g.cfg.Logger.Warn("idem: shutdown timeout: cutting the upstream calls still in flight; their keys turn UNKNOWN (released when nothing was sent): reconcile or resolve them")
	g.stop(errShutdown)
	done := make(chan struct{})
	go func() { g.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(idem.FinalizeTimeout):
		g.cfg.Logger.Error("idem: requests still not finalized after the shutdown; their keys turn UNKNOWN when their leases end")
	}
}

// flushHeld stores the results (and the marks and releases) the engine
// holds because the store did not take them in time: they live only in
// this process. It tries within the shutdown timeout, or, when the
// requests took all of it, for one more store timeout.
func (g *Gateway) flushHeld(shutdownCtx context.Context) {
	ctx := shutdownCtx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), cmp.Or(g.cfg.StoreTimeout, idem.DefaultStoreTimeout))
		defer cancel()
	}
	if err := g.engine.Shutdown(ctx); err != nil {
		g.cfg.Logger.Error("idem: shutdown: results not stored; their keys turn UNKNOWN when their leases end", "err", err)
	}
}
