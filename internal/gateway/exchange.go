package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/valuectx"
	"github.com/idemkit/idem/store"
)

// traceContext is the W3C Trace Context propagator: a client's
// traceparent parents the request's span, and the upstream call carries
// its own span's.
var traceContext propagation.TraceContext

// exchangeOps are the store calls an exchange times, summed by op.
var exchangeOps = [...]string{"acquire", "complete", "release", "mark_unknown", "extend", "get", "claim", "resolve"}

// exchange is what one proxied request did, gathered while it runs, for
// its access-log line (--access-log) and its span's attributes; made only
// when one of them is on. The request's context carries it: the route
// table, the middleware's outcome, the engine's Began and StoreCall and
// the upstream call each fill their part in.
type exchange struct {
	ctx       valuectx.Context[exchangeKey, *exchange] // the request's context, carrying the exchange
	w         statusWriter
	start     time.Time
	accessLog bool // the line is written; logOutcome's is not

	// Set on the request's goroutine.
	route, outcome string
	id             store.ID
	keyed          bool // Began told the key
	fence          int64

	// Set by the upstream call and by store calls, some made by the
	// lease's heartbeat: nanoseconds.
	upstream atomic.Int64
	store    [len(exchangeOps)]atomic.Int64
}

type exchangeKey struct{}

// exchangesMade is set once the process made an exchange (traces or the
// access log on). Until then no context carries one, and exchangeOf does
// not look: a lookup walks the request's whole context chain, and each
// context.WithoutCancel on the way costs an allocation (Go boxes it to
// walk on), five lookups a request.
var exchangesMade atomic.Bool

// exchangeOf returns the exchange ctx carries, or nil.
func exchangeOf(ctx context.Context) *exchange {
	if !exchangesMade.Load() {
		return nil
	}
	x, _ := ctx.Value(exchangeKey{}).(*exchange)
	return x
}

// observed gives a request an exchange when the access log or traces are
// on: its span (a client's traceparent its parent), and, once it is
// answered, its span's attributes and its access-log line.
func (g *Gateway) observed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accessLog := g.current.Load().cfg.AccessLog
		if g.cfg.Tracer == nil && !accessLog {
			next.ServeHTTP(w, r) // no exchange: it would cost a context and a request copy for nothing
			return
		}
		if !exchangesMade.Load() { // a store each request would bounce the cache line between cores
			exchangesMade.Store(true)
		}
		x := &exchange{start: time.Now(), accessLog: accessLog}
		ctx := r.Context()
		var span trace.Span
		if g.cfg.Tracer != nil {
			ctx = traceContext.Extract(ctx, propagation.HeaderCarrier(r.Header))
			ctx, span = g.cfg.Tracer.Start(ctx, "idem.request "+r.Method, trace.WithSpanKind(trace.SpanKindServer))
		}
		x.ctx = valuectx.Context[exchangeKey, *exchange]{Context: ctx, Carried: x}
		x.w.ResponseWriter = w
		defer g.finish(x, r, span)
		next.ServeHTTP(&x.w, r.WithContext(&x.ctx))
	})
}

// note records the route and the outcome of the request ctx carries.
func (x *exchange) note(route, outcome string) {
	if x != nil {
		x.route, x.outcome = route, outcome
	}
}

// finish ends the request's span with its attributes and writes its
// access-log line.
func (g *Gateway) finish(x *exchange, r *http.Request, span trace.Span) {
	elapsed := time.Since(x.start)
	status := x.w.status
	if span != nil {
		span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.Int("http.response.status_code", status),
			attribute.String("idem.route", x.route), attribute.String("idem.outcome", x.outcome))
		if x.keyed {
			span.SetAttributes(attribute.Int64("idem.fence", x.fence), attribute.String("idem.tenant_hash", shortHash(x.id.Tenant)),
				attribute.String("idem.key_hash", shortHash(x.id.Key)))
		}
		if up := x.upstream.Load(); up > 0 {
			span.SetAttributes(attribute.Float64("idem.upstream.seconds", time.Duration(up).Seconds()))
		}
		for i, op := range exchangeOps {
			if d := x.store[i].Load(); d > 0 {
				span.SetAttributes(attribute.Float64("idem.store."+op+".seconds", time.Duration(d).Seconds()))
			}
		}
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		span.End()
	}
	if x.accessLog {
		g.logAccess(x, r, status, elapsed, span)
	}
}

// logAccess writes the request's access-log line: at info, at warn for
// the outcomes logOutcome warns of. The tenant and the key are hashed
// (shortHash): a tenant may be a client's own identifier, and a key
// names one of its requests.
func (g *Gateway) logAccess(x *exchange, r *http.Request, status int, elapsed time.Duration, span trace.Span) {
	level := slog.LevelInfo
	switch x.outcome {
	case idemhttp.OutcomeStoreError.String(), idemhttp.OutcomeLeaseLost.String(), idemhttp.OutcomeFailedOpen.String():
		level = slog.LevelWarn
	}
	log := g.cfg.Logger
	if !log.Enabled(r.Context(), level) {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs, slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("route", x.route),
		slog.Int("status", status), slog.String("outcome", x.outcome), millis("duration_ms", elapsed))
	if x.keyed {
		attrs = append(attrs, slog.String("tenant_hash", shortHash(x.id.Tenant)), slog.String("key_hash", shortHash(x.id.Key)),
			slog.Int64("fence", x.fence))
	}
	if up := x.upstream.Load(); up > 0 {
		attrs = append(attrs, millis("upstream_ms", time.Duration(up)))
	}
	var calls []any
	for i, op := range exchangeOps {
		if d := x.store[i].Load(); d > 0 {
			calls = append(calls, millis(op, time.Duration(d)))
		}
	}
	if calls != nil {
		attrs = append(attrs, slog.Group("store_ms", calls...))
	}
	if span != nil && span.SpanContext().IsValid() {
		attrs = append(attrs, slog.String("trace_id", span.SpanContext().TraceID().String()))
	}
	log.LogAttrs(r.Context(), level, "idem: request", attrs...)
}

// millis is a duration in milliseconds, to the microsecond.
func millis(name string, d time.Duration) slog.Attr {
	return slog.Float64(name, float64(d.Microseconds())/1000)
}

// shortHash is the first 8 bytes of the SHA-256 of s, in hex: a tenant or
// a key as the access log and spans name it, which can be matched against
// a known one (printf %s KEY | sha256sum | cut -c1-16) and not read back.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// Began implements idem.BeginObserver: the key and the fence of the
// request whose context carries an exchange.
func (t *telemetry) Began(ctx context.Context, id store.ID, _ idem.Decision, fence int64) {
	if x := exchangeOf(ctx); x != nil {
		x.id, x.keyed, x.fence = id, true, fence
	}
}

// timeStoreCall adds a store call's time to the exchange ctx carries.
func timeStoreCall(ctx context.Context, op string, elapsed time.Duration) {
	x := exchangeOf(ctx)
	if x == nil {
		return
	}
	for i, name := range exchangeOps {
		if name == op {
			x.store[i].Add(int64(elapsed))
			return
		}
	}
}

// statusWriter keeps the status a request was answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // not an informational 1xx
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer
// (flushes, deadlines, a hijack).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
