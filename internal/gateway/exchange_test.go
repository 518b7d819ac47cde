package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/idemhttp"
)

// hashPrefix is the access log's hash of a tenant or a key, as
// docs/deployment.md tells an operator to compute it.
func hashPrefix(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:16]
}

// Issue 36, item 2: with --access-log every proxied request gets one line
// ("idem: request") with its method, path, route, status, outcome, the
// hashes of its tenant and key (never the key or the tenant), its fence,
// and the durations of its upstream call and of each store call; the
// line per key event is not written besides.
func TestAccessLogLine(t *testing.T) {
	up := newWireUpstream(t)
	var logs syncBuffer
	g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), AccessLog: true,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), // the key events' level
		Routes: []Route{{Pattern: "POST /charges", Name: "charges"}, {Pattern: "POST /search", PassThrough: true}}})
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	post := func(path, key string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer alice")
		if key != "" {
			req.Header.Set(idemhttp.HeaderKey, key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	post("/charges", "order-secret-42")
	post("/charges", "order-secret-42")
	post("/search", "")
	lines := logs.lines(t, "idem: request")
	if len(lines) != 3 {
		t.Fatalf("%d access-log lines; want 3, one a request:\n%s", len(lines), logs.String())
	}
	fence := up.requests()[0].header.Get(FenceHeader)
	tenant := authorizationTenant("Bearer alice")
	for i, want := range []map[string]any{
		{"method": "POST", "path": "/charges", "route": "charges", "status": 201.0, "outcome": "executed",
			"tenant_hash": hashPrefix(tenant), "key_hash": hashPrefix("order-secret-42"), "fence": fence},
		{"route": "charges", "status": 201.0, "outcome": "replayed", "key_hash": hashPrefix("order-secret-42"), "fence": fence},
		{"path": "/search", "route": "POST /search", "status": 201.0, "outcome": "pass_through"},
	} {
		line := lines[i]
		for field, v := range want {
			got := line[field]
			if f, ok := got.(float64); ok && field == "fence" {
				got = strconv.FormatInt(int64(f), 10)
			}
			if got != v {
				t.Errorf("line %d: %s = %v; want %v (line %v)", i, field, got, v, line)
			}
		}
		if line["level"] != "INFO" {
			t.Errorf("line %d: level %v; want INFO", i, line["level"])
		}
		if _, ok := line["duration_ms"].(float64); !ok {
			t.Errorf("line %d: no duration_ms: %v", i, line)
		}
	}
	// The upstream was called for the first and the third; the store for
	// the first (acquire, complete) and the second (acquire).
	for i, upstream := range []bool{true, false, true} {
		if _, ok := lines[i]["upstream_ms"].(float64); ok != upstream {
			t.Errorf("line %d: upstream_ms present %v; want %v: %v", i, ok, upstream, lines[i])
		}
	}
	for i, ops := range [][]string{{"acquire", "complete"}, {"acquire"}, nil} {
		store, _ := lines[i]["store_ms"].(map[string]any)
		if len(store) != len(ops) {
			t.Errorf("line %d: store_ms %v; want %v", i, store, ops)
		}
		for _, op := range ops {
			if _, ok := store[op].(float64); !ok {
				t.Errorf("line %d: store_ms.%s missing: %v", i, op, store)
			}
		}
	}
	// The metrics count them by route: a route's name, else its match.
	m := scrape(t, g)
	for series, want := range map[string]float64{
		`idem_requests_total{outcome="executed",route="charges"}`: 1, `idem_requests_total{outcome="replayed",route="charges"}`: 1,
		`idem_requests_total{outcome="pass_through",route="POST /search"}`: 1, `idem_requests_total{outcome="executed",route=""}`: 0,
		`idem_upstream_seconds_count{route="charges"}`: 1, `idem_upstream_seconds_count{route="POST /search"}`: 1,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v); want %v", series, got, ok, want)
		}
	}
	text := logs.String()
	if strings.Contains(text, "order-secret-42") || strings.Contains(text, tenant) {
		t.Errorf("the log holds the raw key or tenant:\n%s", text)
	}
	if strings.Contains(text, `"msg":"idem: executed"`) {
		t.Errorf("the line per key event is written besides the access log:\n%s", text)
	}
}

// Issue 36, item 2: a client's traceparent parents the request's span,
// and the upstream gets the upstream call's span as its own: one trace
// from the client through the gateway to the upstream. The request's span
// says its route, outcome, fence and the store calls' and upstream
// call's durations.
func TestTraceCrossesTheGateway(t *testing.T) {
	var mu sync.Mutex
	var upstreamParent string
	up := newWireUpstream(t)
	up.answer = func(w http.ResponseWriter, r *http.Request, body string) {
		mu.Lock()
		upstreamParent = r.Header.Get("Traceparent")
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(t.Context())
	g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), Tracer: tp.Tracer("test"),
		Routes: []Route{{Pattern: "POST /charges", Name: "charges"}}})
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	const client = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	send(t, srv, http.MethodPost, `{}`, idemhttp.HeaderKey, "k-1", "Authorization", "Bearer alice", "Traceparent", client)

	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans.GetSpans() {
		byName[s.Name] = s
	}
	request, upstream := byName["idem.request POST"], byName["idem.upstream"]
	if request.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || request.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("the request's span is in trace %s under %s; want the client's trace and span (spans %v)",
			request.SpanContext.TraceID(), request.Parent.SpanID(), spans.GetSpans())
	}
	if request.SpanKind != trace.SpanKindServer || upstream.Parent.SpanID() != request.SpanContext.SpanID() {
		t.Fatalf("the upstream call's span is under %s; want the request's %s", upstream.Parent.SpanID(), request.SpanContext.SpanID())
	}
	mu.Lock()
	got := upstreamParent
	mu.Unlock()
	if want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + upstream.SpanContext.SpanID().String() + "-01"; got != want {
		t.Fatalf("the upstream got traceparent %q; want %q, the upstream call's span", got, want)
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range request.Attributes {
		attrs[kv.Key] = kv.Value
	}
	fence, _ := strconv.ParseInt(up.requests()[0].header.Get(FenceHeader), 10, 64)
	if attrs["idem.route"].AsString() != "charges" || attrs["idem.outcome"].AsString() != "executed" ||
		attrs["idem.fence"].AsInt64() != fence || attrs["http.response.status_code"].AsInt64() != 201 ||
		attrs["idem.key_hash"].AsString() != hashPrefix("k-1") {
		t.Errorf("the request's span attributes %v; want route charges, outcome executed, fence %d, status 201, the key's hash", attrs, fence)
	}
	for _, name := range []attribute.Key{"idem.store.acquire.seconds", "idem.store.complete.seconds", "idem.upstream.seconds"} {
		if _, ok := attrs[name]; !ok {
			t.Errorf("the request's span has no %s: %v", name, attrs)
		}
	}
}

// A first request executed is a key event of the high-volume, expected
// kind: its line is at debug level, so that the default (info) writes no
// line per request; --access-log is the line per request.
func TestExecutedLoggedAtDebug(t *testing.T) {
	up := newWireUpstream(t)
	for level, want := range map[slog.Level]bool{slog.LevelInfo: false, slog.LevelDebug: true} {
		var logs syncBuffer
		g := newTestGateway(t, Config{Upstream: mustURL(t, up.URL), Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: level}))})
		srv := httptest.NewServer(g.Handler())
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer alice")
		req.Header.Set("Idempotency-Key", "executed-"+level.String())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if got := strings.Contains(logs.String(), `"msg":"idem: executed"`); got != want {
			t.Errorf("at %v, an executed request logged: %v; want %v:\n%s", level, got, want, logs.String())
		}
	}
}
