package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem/internal/redact"
)

// The --otlp-protocol values: OTEL_EXPORTER_OTLP_PROTOCOL's names.
const (
	otlpHTTP = "http/protobuf"
	otlpGRPC = "grpc"
)

// otlpTarget is where the spans go: --otlp-endpoint and --otlp-protocol,
// checked.
type otlpTarget struct {
	protocol string // otlpHTTP or otlpGRPC
	hostPort string
	path     string // OTLP/HTTP's URL path
	tls      bool
}

// parseOTLP checks --otlp-endpoint and --otlp-protocol: an http:// or
// https:// URL (https: over TLS, with the system's roots; for OTLP/HTTP
// its path, /v1/traces when it has none), or host:port as before issue
// 36, which is http://host:port.
func parseOTLP(endpoint, protocol string) (otlpTarget, error) {
	t := otlpTarget{protocol: protocol}
	if protocol != otlpHTTP && protocol != otlpGRPC {
		return t, fmt.Errorf("%w: --otlp-protocol %q: want %s or %s", errUsage, protocol, otlpHTTP, otlpGRPC)
	}
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint // host:port, the form of before
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return t, fmt.Errorf("%w: --otlp-endpoint %q: want http://HOST:PORT or https://HOST:PORT (https: over TLS), or HOST:PORT (http)", errUsage, redact.URL(endpoint))
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return t, fmt.Errorf("%w: --otlp-endpoint %q: name the port (4318 is OTLP/HTTP's, 4317 OTLP/gRPC's)", errUsage, redact.URL(endpoint))
	}
	t.hostPort, t.tls, t.path = u.Host, u.Scheme == "https", strings.TrimSuffix(u.Path, "/")
	switch {
	case protocol == otlpGRPC && t.path != "":
		return t, fmt.Errorf("%w: --otlp-endpoint %q: OTLP/gRPC takes no path", errUsage, redact.URL(endpoint))
	case t.path == "":
		t.path = "/v1/traces"
	}
	return t, nil
}

// newTracerProvider exports the gateway's spans to t in batches, as
// service.name idem (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// override it, as in every OpenTelemetry SDK). The exporter connects
// when it first exports: a collector that is down costs spans, not the
// start. The sampler follows the client's traceparent (sampled or not),
// and samples every request that comes without one.
func newTracerProvider(ctx context.Context, t otlpTarget) (*sdktrace.TracerProvider, error) {
	var client otlptrace.Client
	if t.protocol == otlpGRPC {
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(t.hostPort)}
		if !t.tls {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		client = otlptracegrpc.NewClient(opts...)
	} else {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(t.hostPort), otlptracehttp.WithURLPath(t.path)}
		if !t.tls {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		client = otlptracehttp.NewClient(opts...)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", "idem"), attribute.String("service.version", version())),
		resource.WithFromEnv()) // the later wins: the environment's names over idem's
	if err != nil {
		exp.Shutdown(ctx)
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
