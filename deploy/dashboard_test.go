package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

type panel struct {
	ID         int
	Type       string
	Title      string
	Datasource struct{ UID string }
	GridPos    struct{ X, Y, W, H int }
	Targets    []struct{ Expr, RefID string }
	Panels     []panel // a collapsed row's
}

type dashboard struct {
	UID        string
	Title      string
	Templating struct {
		List []struct {
			Name, Type string
			Query      any
		}
	}
	Panels []panel
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/idem.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/idem.json: %v", err)
	}
	return d
}

// queries returns every PromQL expression of the dashboard by where it
// is, with Grafana's variables replaced by what PromQL accepts.
func (d dashboard) queries(t *testing.T) map[string]string {
	t.Helper()
	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$instance", ".*")
	q := map[string]string{}
	for _, v := range d.Templating.List {
		if m, ok := v.Query.(map[string]any); ok && v.Type == "query" {
			// label_values(METRIC_SELECTOR, LABEL): the selector is the query.
			s, _ := m["query"].(string)
			sel := regexp.MustCompile(`^label_values\((.*), *\w+\)$`).FindStringSubmatch(s)
			if sel == nil {
				t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, s)
				continue
			}
			q["variable "+v.Name] = vars.Replace(sel[1])
		}
	}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				q[fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, tg.RefID)] = vars.Replace(tg.Expr)
			}
		}
	}
	walk(d.Panels)
	return q
}

// The dashboard parses, its panels have unique ids, fit the 24-column
// grid and query the dashboard's data source variable, and every panel
// that is not a row has a query.
func TestDashboardIsWellFormed(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard uid %q, title %q, %d panels; want all three", d.UID, d.Title, len(d.Panels))
	}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("panel %q: id %d is zero or not unique", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: gridPos %+v does not fit the 24-column grid", p.Title, p.GridPos)
			}
			if p.Type == "row" {
				continue
			}
			if p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: data source %q; want the variable ${datasource}", p.Title, p.Datasource.UID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
					t.Errorf("panel %q: a target without expr or refId", p.Title)
				}
			}
		}
	}
	walk(d.Panels)
}

// Every query of the dashboard names metrics a running gateway exports,
// with label values it exports.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	ex := scrapeGateway(t)
	for where, expr := range readDashboard(t).queries(t) {
		checkExpr(t, where, expr, ex)
	}
}

// Every query of the dashboard is valid PromQL: promtool checks them as
// the expressions of recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	bin := promtool(t)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	i := 0
	for where, expr := range readDashboard(t).queries(t) {
		i++
		b, _ := json.Marshal(expr) // a JSON string is a YAML string
		fmt.Fprintf(&rules, "      # %s\n      - record: dashboard:query_%d\n        expr: %s\n", strings.ReplaceAll(where, "\n", " "), i, b)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the dashboard's %d queries: %v\n%s\n%s", i, err, out, rules.String())
	}
}
