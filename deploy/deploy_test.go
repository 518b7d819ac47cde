// Package deploy holds no Go code: its tests check the files an operator
// installs next to idem serve. The Prometheus alert rules pass promtool
// and their own unit tests, the Grafana dashboard parses, and every
// metric either uses is one a running gateway registers, with the label
// values it exports (alerts_test.go, dashboard_test.go); the systemd unit
// passes systemd-analyze (systemd_test.go). The unit's boot test in a
// container is scripts/systemd-check.sh (make systemd-check).
package deploy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// exported is what a gateway's /metrics has: for each series name, its
// label names and, for each, the values seen.
type exported map[string]map[string]map[string]bool

// failingGets is the memory store with Get failing: /readyz then records a
// store error, so idem_store_seconds{result="error"} exists to be checked.
type failingGets struct{ *memstore.Store }

func (failingGets) Get(context.Context, store.ID) (store.Record, error) {
	return store.Record{}, errors.New("deploy test: injected store error")
}

// scrapeGateway runs a gateway on the memory store, as `idem serve`
// does by default, sends it a request, its replay and a readiness check
// that fails, and returns what its /metrics exports.
func scrapeGateway(t *testing.T) exported {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	store, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	g, err := gateway.New(gateway.Config{Upstream: u, Store: failingGets{store}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "deploy-test")
		req.Header.Set("Authorization", "Bearer deploy-test")
		rec := httptest.NewRecorder()
		g.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			t.Fatalf("POST through the gateway = %d %s", rec.Code, rec.Body)
		}
	}
	admin := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		g.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	if rec := admin("/readyz"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with failing gets = %d; want 503", rec.Code)
	}
	rec := admin("/metrics")
	body, _ := io.ReadAll(rec.Body)
	return parseExposition(t, string(body))
}

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

func parseExposition(t *testing.T, body string) exported {
	t.Helper()
	ex := exported{}
	for line := range strings.SplitSeq(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("/metrics: unparsed line %q", line)
		}
		labels := ex[m[1]]
		if labels == nil {
			labels = map[string]map[string]bool{}
			ex[m[1]] = labels
		}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			if labels[p[1]] == nil {
				labels[p[1]] = map[string]bool{}
			}
			labels[p[1]][p[2]] = true
		}
	}
	if len(ex) == 0 {
		t.Fatal("/metrics exported nothing")
	}
	return ex
}

var (
	// seriesRef is a metric of idem or of its process in a PromQL
	// expression, or Prometheus's own up, with its label matchers if any.
	seriesRef = regexp.MustCompile(`\b((?:idem|process|go)_[a-zA-Z0-9_]*|up)\b(\{[^}]*\})?`)
	matcher   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	// plainAlternatives is a regular expression that only lists values.
	plainAlternatives = regexp.MustCompile(`^[a-zA-Z0-9_]+(\|[a-zA-Z0-9_]+)*$`)
)

// targetLabels are added by Prometheus when it scrapes, not by the gateway.
var targetLabels = map[string]bool{"job": true, "instance": true}

// checkExpr reports every metric expr names that ex does not have, and
// every label matcher whose label or listed value ex does not have.
func checkExpr(t *testing.T, where, expr string, ex exported) {
	t.Helper()
	refs := seriesRef.FindAllStringSubmatch(expr, -1)
	if len(refs) == 0 {
		t.Errorf("%s: no idem metric in %q", where, expr)
	}
	for _, ref := range refs {
		if ref[1] == "up" {
			continue // Prometheus's own series of every target it scrapes
		}
		labels, ok := ex[ref[1]]
		if !ok {
			t.Errorf("%s: %s is not exported by a running gateway (expr %q)", where, ref[1], expr)
			continue
		}
		for _, m := range matcher.FindAllStringSubmatch(ref[2], -1) {
			name, op, value := m[1], m[2], m[3]
			if targetLabels[name] {
				continue
			}
			values, ok := labels[name]
			if !ok {
				t.Errorf("%s: %s has no label %s (expr %q)", where, ref[1], name, expr)
				continue
			}
			if (op == "=" || op == "=~") && plainAlternatives.MatchString(value) {
				for v := range strings.SplitSeq(value, "|") {
					if !values[v] {
						t.Errorf("%s: %s{%s} never takes the value %q (expr %q)", where, ref[1], name, v, expr)
					}
				}
			}
		}
	}
}

// promtool returns the path of promtool: Debian's prometheus package,
// which scripts/services.sh installs.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Unavailable(t, "promtool (Debian package prometheus)", err)
	}
	return path
}
