package gateway

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"math/big"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/internal/testinfra/golden"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
)

// The admin API's OpenAPI document and the metrics page of docs/reference
// are held to the code here; TestReference... -update rewrites the pages.
var update = flag.Bool("update", false, "rewrite the pages of docs/reference from the code")

const regenerate = "go test ./internal/gateway -run TestReference -update"

// holdReference compares the committed page with got, or writes got with -update.
func holdReference(t *testing.T, page string, got []byte) {
	t.Helper()
	golden.Hold(t, filepath.Join("..", "..", "docs", "reference", page), got, *update, regenerate)
}

// TestReferenceOpenAPI keeps docs/reference/admin-openapi.json a copy of
// the document the binary embeds and serves (admin-openapi.json here:
// an embed directive reaches no file outside its package). Edit that one.
func TestReferenceOpenAPI(t *testing.T) {
	holdReference(t, "admin-openapi.json", adminOpenAPI)
}

// openAPIDoc is as much of the OpenAPI document as the test reads.
type openAPIDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"` // path → method (or "parameters") → operation
	Components struct {
		Responses map[string]openAPIResponse `json:"responses"`
		Schemas   map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

type openAPIOperation struct {
	Security  *[]map[string][]string     `json:"security"` // [] for no token; nil: the document's (a token)
	Responses map[string]openAPIResponse `json:"responses"`
}

type openAPIResponse struct {
	Ref     string                     `json:"$ref"`
	Content map[string]json.RawMessage `json:"content"`
}

// operations returns the document's operations by "METHOD /path".
func (d *openAPIDoc) operations(t *testing.T) map[string]openAPIOperation {
	t.Helper()
	ops := map[string]openAPIOperation{}
	for path, item := range d.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op openAPIOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			for status, r := range op.Responses {
				if name, ok := strings.CutPrefix(r.Ref, "#/components/responses/"); ok {
					op.Responses[status] = d.Components.Responses[name]
				}
			}
			ops[strings.ToUpper(method)+" "+path] = op
		}
	}
	return ops
}

// servedAdminRoutes reads adminHandler's source for the patterns it
// registers, as "METHOD /path" (the console's, which has no method, as
// GET: it reads files). The catch-all /v1/ is not a route: it is the
// answer, behind the token, to a path that is none.
func servedAdminRoutes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "admin.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	pattern := regexp.MustCompile(`^(GET|HEAD|POST|PUT|PATCH|DELETE) /`)
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "adminHandler" {
			continue
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			switch arg := call.Args[0].(type) {
			case *ast.BasicLit:
				if p, _ := strconv.Unquote(arg.Value); pattern.MatchString(p) {
					routes = append(routes, p)
				}
			case *ast.SelectorExpr:
				if isIdent(arg.X, "console") && arg.Sel.Name == "Path" {
					routes = append(routes, "GET "+console.Path)
				}
			}
			return true
		})
	}
	if len(routes) < 5 {
		t.Fatalf("found %d routes in adminHandler (%v): has the way it registers them changed?", len(routes), routes)
	}
	return routes
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// TestAdminOpenAPI holds the OpenAPI document to the admin API: every
// route adminHandler registers is in it with its method, and every
// operation in it is served; real calls through the handler answer the
// statuses the document lists, with its content types; a call without
// the token gets the document's 401 and a call of another site's page its
// 403; and each schema names the JSON members of the Go type it
// describes.
func TestAdminOpenAPI(t *testing.T) {
	var doc openAPIDoc
	if err := json.Unmarshal(adminOpenAPI, &doc); err != nil {
		t.Fatalf("admin-openapi.json: %v", err)
	}
	ops := doc.operations(t)
	served := servedAdminRoutes(t)
	for _, route := range served {
		if _, ok := ops[route]; !ok {
			t.Errorf("the admin API serves %s; admin-openapi.json does not have it", route)
		}
	}
	for route := range ops {
		if !slices.Contains(served, route) {
			t.Errorf("admin-openapi.json has %s; adminHandler does not serve it", route)
		}
	}

	const token = "reference-s3cret-token"
	g := adminGateway(t, Config{AdminToken: token, EffectiveConfig: []byte(`{"settings":{}}` + "\n")})
	ctx := context.Background()
	done, unknown, other := store.ID{Tenant: "acme", Key: "done"}, store.ID{Tenant: "acme", Key: "unknown"}, store.ID{Tenant: "acme", Key: "other"}
	fence := unknownKey(t, g.Engine(), done)
	if err := g.Engine().Resolve(ctx, done, fence, &store.Result{Status: 201, Body: []byte(`{"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	fence = unknownKey(t, g.Engine(), unknown)
	unknownKey(t, g.Engine(), other)

	// Calls in order: a change acts on what the calls before it left.
	calls := []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/healthz", "", 200},
		{"GET", "/readyz", "", 200},
		{"GET", "/metrics", "", 200},
		{"GET", "/ui/", "", 200},
		{"GET", "/v1/openapi.json", "", 200},
		{"GET", "/v1/keys?state=unknown", "", 200},
		{"GET", "/v1/keys", "", 400},
		{"GET", "/v1/keys/acme/done", "", 200},
		{"GET", "/v1/keys/acme/absent", "", 404},
		{"GET", "/v1/keys/acme/done/result", "", 200},
		{"GET", "/v1/keys/acme/unknown/result", "", 409},
		{"POST", "/v1/keys/acme/unknown/resolve", `{"fence":1}`, 400},
		{"POST", "/v1/keys/acme/unknown/resolve", fmt.Sprintf(`{"fence":%d,"outcome":"not_executed"}`, fence), 204},
		{"POST", "/v1/keys/acme/done/resolve", fmt.Sprintf(`{"fence":%d,"outcome":"not_executed"}`, fence), 409},
		{"POST", "/v1/keys/acme/other/reconcile", "", 409}, // no --reconcile-url
		{"DELETE", "/v1/keys/acme/other", "", 409},         // UNKNOWN
		{"DELETE", "/v1/keys/acme/done", "", 204},
		{"DELETE", "/v1/keys/acme/done", "", 404},
		{"GET", "/v1/stats", "", 200},
		{"GET", "/v1/audit", "", 200},
		{"GET", "/v1/config", "", 200},
	}
	called := map[string]bool{}
	check := func(route string, req *http.Request, want int) {
		t.Helper()
		w := call(g, req)
		op, ok := ops[route]
		if !ok {
			t.Errorf("%s %s: the document has no %s", req.Method, req.URL, route)
			return
		}
		if w.Code != want {
			t.Errorf("%s %s = %d %s; want %d", req.Method, req.URL, w.Code, w.Body, want)
		}
		resp, ok := op.Responses[strconv.Itoa(w.Code)]
		if !ok {
			t.Errorf("%s %s = %d; the document lists no %d for %s", req.Method, req.URL, w.Code, w.Code, route)
			return
		}
		got := w.Header().Get("Content-Type")
		media, _, _ := mime.ParseMediaType(got)
		if _, ok := resp.Content[media]; !ok && (len(resp.Content) > 0 || w.Body.Len() > 0) {
			t.Errorf("%s %s = %d with Content-Type %q; the document's %d of %s has %v", req.Method, req.URL, w.Code, got, w.Code, route, slices.Sorted(maps.Keys(resp.Content)))
		}
	}
	for _, c := range calls {
		req := adminRequest(c.method, c.path, c.body)
		req.Header.Set("Authorization", "Bearer "+token)
		route := routeOf(req, served)
		called[route] = true
		check(route, req, c.want)
	}
	for route, op := range ops {
		if !called[route] {
			t.Errorf("%s: no call of this test drives it; add one", route)
		}
		method, path, _ := strings.Cut(route, " ")
		path = strings.NewReplacer("{tenant}", "acme", "{key}", "k").Replace(path)
		if strings.HasPrefix(path, "/v1/") && (op.Security == nil || len(*op.Security) > 0) {
			check(route, adminRequest(method, path, ""), http.StatusUnauthorized) // no token
		}
		if strings.HasPrefix(path, "/v1/") || strings.HasPrefix(path, console.Path) {
			req := adminRequest(method, path, "")
			req.Host = "rebound.example:9090"
			check(route, req, http.StatusForbidden)
		}
	}
	w := call(g, adminRequest("GET", "/v1/openapi.json", ""))
	if !bytes.Equal(w.Body.Bytes(), adminOpenAPI) {
		t.Errorf("GET /v1/openapi.json without a token = %d %.200s; want the document", w.Code, w.Body)
	}

	for name, typ := range map[string]reflect.Type{
		"Problem": reflect.TypeFor[idemhttp.Problem](), "Record": reflect.TypeFor[RecordView](), "KeyPage": reflect.TypeFor[KeyPage](),
		"Result": reflect.TypeFor[resultView](), "Resolution": reflect.TypeFor[Resolution](), "Reconciliation": reflect.TypeFor[reconcileView](),
		"Stats": reflect.TypeFor[statsPage](), "StatsSample": reflect.TypeFor[statsSample](),
		"AuditPage": reflect.TypeFor[AuditPage](), "AuditRecord": reflect.TypeFor[AuditRecord](),
	} {
		var members []string
		for i := range typ.NumField() {
			if tag, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); tag != "" && tag != "-" {
				members = append(members, tag)
			}
		}
		slices.Sort(members)
		if props := slices.Sorted(maps.Keys(doc.Components.Schemas[name].Properties)); !slices.Equal(props, members) {
			t.Errorf("schema %s has the properties %v; %v has the JSON members %v", name, props, typ, members)
		}
	}
}

// routeOf returns the served route ("METHOD /path/{param}") that req
// takes, as the admin API's muxes would choose it.
func routeOf(req *http.Request, served []string) string {
	mux := http.NewServeMux()
	for _, route := range served {
		mux.Handle(route, http.NotFoundHandler())
	}
	_, pattern := mux.Handler(req)
	return pattern
}

// metricSetups are gateways that between them register every metric the
// gateway exports: most are always there, a few only with one store or
// with TLS. A metric that every setup has is "always"; any other is
// exported under the conditions of the setups that have it.
var metricSetups = []struct {
	when  string
	store string // a --store URI; "" for the memory store
	tls   bool
}{
	{"`--store memory`", "", false},
	{"a Redis `--store` with `?near_cache=on`", "near_cache=on&coalesce=off", false},
	{"a Redis `--store` that coalesces (the default; not with `?coalesce=off`)", "coalesce=on", false},
	{"`--tls-cert` (listener `proxy`) or `--admin-tls-cert` (listener `admin`)", "coalesce=off", true},
}

// metricFamily is one metric as the registry describes it.
type metricFamily struct {
	name, typ, help string
	labels          []string            // variable labels
	constLabels     map[string][]string // name → the values of the families' series
	when            []string            // the setups that have it
}

// descString reads a prometheus.Desc's String: its only public form.
var descString = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"),(?: unit: "(?:[^"\\]|\\.)*",)? constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// TestReferenceMetrics writes docs/reference/metrics.md from the
// registries of gateways that between them have every metric: the
// registry's descriptions (Describe) give names, help and labels, and a
// Gather after a request through each gives the types (the source's
// Opts, for a family that has no series yet).
func TestReferenceMetrics(t *testing.T) {
	families := map[string]*metricFamily{}
	sourceTypes := metricTypesInSource(t)
	for _, setup := range metricSetups {
		g := metricGateway(t, setup.store, setup.tls)
		ch := make(chan *prometheus.Desc)
		go func() { g.registry.Describe(ch); close(ch) }()
		seen := map[string]bool{}
		for d := range ch {
			m := descString.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read %s", d)
			}
			name, _ := strconv.Unquote(m[1])
			help, _ := strconv.Unquote(m[2])
			if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
				continue
			}
			f := families[name]
			if f == nil {
				f = &metricFamily{name: name, help: help, constLabels: map[string][]string{}, typ: sourceTypes[name]}
				if m[4] != "" {
					f.labels = strings.Split(m[4], ",")
				}
				families[name] = f
			}
			for pair := range strings.SplitSeq(m[3], ",") {
				if label, value, ok := strings.Cut(pair, "="); ok {
					value, _ = strconv.Unquote(value)
					if !slices.Contains(f.constLabels[label], value) {
						f.constLabels[label] = append(f.constLabels[label], value)
					}
				}
			}
			if !seen[name] {
				seen[name] = true
				f.when = append(f.when, setup.when)
			}
		}
		for _, mf := range must(g.registry.Gather()) {
			if f := families[mf.GetName()]; f != nil {
				f.typ = strings.ToLower(mf.GetType().String())
			}
		}
	}
	var b strings.Builder
	b.WriteString(`# Metrics

Generated from the gateway's Prometheus registry (every metric it registers,
in the setups that between them register all of them); do not edit:
` + "`" + regenerate + "`" + ` rewrites it.
The admin API serves them at ` + "`GET /metrics`" + `, with the Go runtime's and the
process's (` + "`go_*`, `process_*`" + `, client_golang's standard collectors), which are
not listed here.

| metric | type | labels | exported | help |
|---|---|---|---|---|
`)
	for _, name := range slices.Sorted(maps.Keys(families)) {
		f := families[name]
		if f.typ == "" {
			t.Errorf("%s: no type: no series after the reference traffic, and no prometheus.XxxOpts{Name: %q} in the source", name, name)
		}
		labels := slices.Clone(f.labels)
		for label, values := range f.constLabels {
			if len(values) > 1 { // a label whose value is the build's or the machine's is not listed with it
				slices.Sort(values)
				label += " (" + strings.Join(values, ", ") + ")"
			}
			labels = append(labels, label)
		}
		slices.Sort(labels)
		when := "always"
		if len(f.when) < len(metricSetups) {
			when = "with " + strings.Join(f.when, "; ")
		}
		if len(labels) == 0 {
			labels = []string{"(none)"}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", name, f.typ, strings.Join(labels, ", "), when,
			strings.ReplaceAll(f.help, "|", `\|`))
	}
	holdReference(t, "metrics.md", []byte(b.String()))
}

// metricGateway returns a gateway of one setup that has served one keyed
// request: the store's and the upstream's histograms have their series.
func metricGateway(t *testing.T, redisOptions string, withTLS bool) *Gateway {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	cfg := Config{Upstream: u}
	if redisOptions != "" {
		uri := testenv.RedisURL()
		if strings.Contains(uri, "?") {
			uri += "&" + redisOptions
		} else {
			uri += "?" + redisOptions
		}
		s, closeStore, err := OpenStore(context.Background(), uri, nil)
		if err != nil {
			testenv.Unavailable(t, "Redis at "+testenv.RedisURL(), err)
		}
		t.Cleanup(func() { closeStore() })
		cfg.Store = s
	}
	if withTLS {
		cert, key := selfSignedFiles(t)
		cfg.TLSCert, cfg.TLSKey, cfg.AdminTLSCert, cfg.AdminTLSKey = cert, key, cert, key
	}
	g := newTestGateway(t, cfg)
	req := httptest.NewRequest("POST", "/orders", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer reference")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("reference-metrics-%d", time.Now().UnixNano()))
	w := httptest.NewRecorder()
	g.Handler().ServeHTTP(w, req)
	if w.Code != 201 {
		t.Fatalf("the reference request = %d %s; want 201", w.Code, w.Body)
	}
	return g
}

// selfSignedFiles writes a self-signed certificate and its key as PEM files.
func selfSignedFiles(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for file, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// metricTypesInSource returns the type of every metric the gateway's
// source names in a prometheus.XxxOpts{Name: "..."}: the type of one that
// has no series yet, which Gather does not show.
func metricTypesInSource(t *testing.T) map[string]string {
	t.Helper()
	types := map[string]string{}
	names, _ := filepath.Glob("*.go")
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok || !isIdent(sel.X, "prometheus") || !strings.HasSuffix(sel.Sel.Name, "Opts") {
				return true
			}
			for _, e := range lit.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok && isIdent(kv.Key, "Name") {
					if s, ok := kv.Value.(*ast.BasicLit); ok {
						name, _ := strconv.Unquote(s.Value)
						types[name] = strings.ToLower(strings.TrimSuffix(sel.Sel.Name, "Opts"))
					}
				}
			}
			return true
		})
	}
	return types
}
