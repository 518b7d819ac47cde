package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// receivedSpan is a span an OTLP receiver got, with its resource's
// service.name.
type receivedSpan struct {
	service string
	span    *tracepb.Span
}

// otlpReceiver collects the spans exported to it, over OTLP/HTTP or
// OTLP/gRPC.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []receivedSpan
}

func (o *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				o.spans = append(o.spans, receivedSpan{service, s})
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serveHTTP is the receiver as an OTLP/HTTP endpoint (protobuf, at
// /v1/traces): it returns its host:port.
func (o *otlpReceiver) serveHTTP(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil || proto.Unmarshal(body, &req) != nil {
			t.Errorf("OTLP/HTTP receiver: %s %s (%s), %d bytes: not an export request", r.Method, r.URL.Path, r.Header.Get("Content-Type"), len(body))
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		resp, _ := o.Export(r.Context(), &req)
		out, _ := proto.Marshal(resp)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// serveGRPC is the receiver as an OTLP/gRPC endpoint: it returns its
// host:port.
func (o *otlpReceiver) serveGRPC(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, o)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return ln.Addr().String()
}

// span returns the span named name in trace, or fails.
func (o *otlpReceiver) span(t *testing.T, trace, name string) receivedSpan {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var names []string
	for _, s := range o.spans {
		if hex.EncodeToString(s.span.TraceId) == trace && s.span.Name == name {
			return s
		}
		names = append(names, fmt.Sprintf("%s in %x", s.span.Name, s.span.TraceId))
	}
	t.Fatalf("no span %q in trace %s among the %d received: %v", name, trace, len(names), names)
	return receivedSpan{}
}

// Issue 36, item 2: a request's trace crosses client → gateway →
// upstream with one trace id, over OTLP/HTTP (here in the host:port form
// of before, which stays http) and OTLP/gRPC: the client's traceparent
// parents the request's span, the upstream gets the upstream call's span
// as its parent, the spans carry the route, outcome and fence, and the
// resource is service.name idem unless OTEL_SERVICE_NAME says otherwise.
// The access-log line names the trace.
func TestTraceCrossesClientGatewayUpstream(t *testing.T) {
	for _, c := range []struct {
		protocol string
		env      []string
		service  string
	}{{"http/protobuf", nil, "idem"}, {"grpc", []string{"OTEL_SERVICE_NAME=payments-gateway"}, "payments-gateway"}} {
		t.Run(c.protocol, func(t *testing.T) {
			var mu sync.Mutex
			var upstreamParent string
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				upstreamParent = r.Header.Get("Traceparent")
				mu.Unlock()
				w.WriteHeader(http.StatusCreated)
			}))
			defer up.Close()
			receiver := &otlpReceiver{}
			endpoint := receiver.serveHTTP(t) // host:port: the form of before, OTLP/HTTP
			if c.protocol == "grpc" {
				endpoint = "http://" + receiver.serveGRPC(t)
			}
			path := writeConfig(t, "routes:\n  - match: POST /charges\n    name: charges\n")
			g := launchServe(t, c.env, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json", "--config", path,
				"--upstream", up.URL, "--otlp-endpoint", endpoint, "--otlp-protocol", c.protocol, "--access-log")
			g.waitServing(t)
			const trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			if a := post(t, "http://"+g.addr, "k-1", "{}", "Traceparent", "00-"+trace+"-"+parent+"-01"); a.status != http.StatusCreated {
				t.Fatalf("POST = %d %s", a.status, a.body)
			}
			if err := g.stop(t); err != nil { // the spans still batched are exported before exit
				t.Fatalf("exit after SIGTERM = %v\n%s", err, g.logText())
			}
			request := receiver.span(t, trace, "idem.request POST")
			upstream := receiver.span(t, trace, "idem.upstream")
			if got := hex.EncodeToString(request.span.ParentSpanId); got != parent || request.span.Kind != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("the request's span is under %s (kind %v); want the client's %s, a server span", got, request.span.Kind, parent)
			}
			if !bytesEqual(upstream.span.ParentSpanId, request.span.SpanId) {
				t.Errorf("the upstream call's span is under %x; want the request's %x", upstream.span.ParentSpanId, request.span.SpanId)
			}
			mu.Lock()
			got := upstreamParent
			mu.Unlock()
			if want := fmt.Sprintf("00-%s-%x-01", trace, upstream.span.SpanId); got != want {
				t.Errorf("the upstream got traceparent %q; want %q", got, want)
			}
			if request.service != c.service {
				t.Errorf("service.name %q; want %q", request.service, c.service)
			}
			attrs := map[string]string{}
			for _, kv := range request.span.Attributes {
				attrs[kv.Key] = strings.Trim(fmt.Sprint(kv.Value.Value), "&{}")
			}
			for _, want := range []string{"idem.route", "idem.outcome", "idem.fence", "idem.store.acquire.seconds", "idem.upstream.seconds"} {
				if attrs[want] == "" {
					t.Errorf("the request's span has no %s: %v", want, attrs)
				}
			}
			if !strings.Contains(attrs["idem.route"], "charges") || !strings.Contains(attrs["idem.outcome"], "executed") {
				t.Errorf("the request's span: route %s, outcome %s; want charges, executed", attrs["idem.route"], attrs["idem.outcome"])
			}
			var line map[string]any
			for _, ev := range logEvents(t, g) {
				if ev["msg"] == "idem: request" {
					line = ev
				}
			}
			if line["trace_id"] != trace || line["route"] != "charges" || line["outcome"] != "executed" {
				t.Errorf("the access-log line %v; want trace_id %s, route charges, outcome executed", line, trace)
			}
		})
	}
}

func bytesEqual(a, b []byte) bool { return hex.EncodeToString(a) == hex.EncodeToString(b) }

// Issue 36, item 2: the OTLP endpoint is an http:// or https:// URL (or
// host:port, http) and the protocol http/protobuf or grpc; anything else
// exits 2 naming what is wrong, as --check-config does.
func TestOTLPSettingsAreChecked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--otlp-endpoint", "grpc://collector:4317"}, "want http://HOST:PORT or https://HOST:PORT"},
		{[]string{"--otlp-endpoint", "collector"}, "name the port"},
		{[]string{"--otlp-endpoint", "http://collector:4317/v1/traces", "--otlp-protocol", "grpc"}, "OTLP/gRPC takes no path"},
		{[]string{"--otlp-endpoint", "collector:4318", "--otlp-protocol", "http"}, `--otlp-protocol "http": want http/protobuf or grpc`},
		{[]string{"--otlp-protocol", "grpc"}, "--otlp-protocol without --otlp-endpoint"},
	} {
		out, code := runIdem(t, append([]string{"serve", "--upstream", "http://127.0.0.1:1", "--check-config"}, c.args...)...)
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("idem serve %v: exit %d, %q; want 2 and %q", c.args, code, out, c.want)
		}
	}
	out, code := runIdem(t, "serve", "--upstream", "http://127.0.0.1:1", "--check-config=json", "--otlp-endpoint", "https://collector:4317", "--otlp-protocol", "grpc")
	var cfg effectiveConfig
	if code != 0 || json.Unmarshal([]byte(out), &cfg) != nil || cfg.Settings["otlp-protocol"].Value != "grpc" || cfg.Settings["otlp-endpoint"].Reload {
		t.Errorf("--check-config=json with an OTLP/gRPC endpoint: exit %d, %s; want 0, otlp-protocol grpc, restart only", code, out)
	}
}

// Issue 36, item 2: idem version prints the module version, the VCS
// revision (or that the build has none) and the Go version; /metrics has
// idem_build_info with the same. The test's binary is built with go
// build, unstamped here (GOFLAGS=-buildvcs=false, or a git worktree,
// whose .git is a file: the toolchain stamps no revision then):
// TestBuildOf holds the stamped case.
func TestVersionAndBuildInfo(t *testing.T) {
	out, code := runIdem(t, "version")
	version, revision := "(devel)", "unknown"
	if m := regexp.MustCompile(`^idem (\S+) \(revision ([0-9a-f]{40})(, modified)?, (go\S+)\)\n$`).FindStringSubmatch(out); m != nil && m[4] == runtime.Version() {
		version, revision = m[1], m[2] // a stamped build
		if m[3] != "" {
			revision += "+modified"
		}
	} else if want := fmt.Sprintf("idem (devel) (no revision: built without VCS stamping, %s)\n", runtime.Version()); code != 0 || out != want {
		t.Fatalf("idem version: exit %d, %q; want %q", code, out, want)
	}
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL)
	series := fmt.Sprintf(`idem_build_info{goversion=%q,revision=%q,version=%q}`, runtime.Version(), revision, version)
	if v := g.metric(t, series); v != 1 {
		t.Fatalf("%s = %v; want 1\n%s", series, v, g.metrics(t))
	}
}
