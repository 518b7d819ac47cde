package deploy

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type rule struct {
	Alert       string
	Expr        string
	For         string
	Labels      map[string]string
	Annotations map[string]string
}

func readRules(t *testing.T) []rule {
	t.Helper()
	var file struct{ Groups []struct{ Rules []rule } }
	readYAML(t, "prometheus/idem-alerts.yml", &file)
	var rules []rule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("prometheus/idem-alerts.yml has no rules")
	}
	return rules
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// promtool checks the rules and runs their unit tests: each alert fires
// on a series that should page and not on a quiet one.
func TestAlertRulesPassPromtool(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", "idem-alerts.yml"}, {"test", "rules", "idem-alerts.test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// Every alert watches metrics a running gateway exports, with label values
// it exports, so a renamed metric or outcome cannot leave an alert silent.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	ex := scrapeGateway(t)
	for _, r := range readRules(t) {
		checkExpr(t, r.Alert, r.Expr, ex)
	}
}

// Every alert has a severity, a summary, a description and a runbook
// section in docs/deployment.md, and a unit test in which it fires.
func TestAlertRulesAreDocumentedAndTested(t *testing.T) {
	doc, err := os.ReadFile("../docs/deployment.md")
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	readYAML(t, "prometheus/idem-alerts.test.yml", &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	for _, r := range readRules(t) {
		if r.Alert == "" {
			t.Errorf("a rule without an alert name: %q (recording rules belong elsewhere)", r.Expr)
			continue
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q; want warning or critical", r.Alert, s)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		anchor := strings.ToLower(r.Alert)
		if !strings.HasSuffix(r.Annotations["runbook_url"], "docs/deployment.md#"+anchor) {
			t.Errorf("%s: runbook_url %q; want docs/deployment.md#%s", r.Alert, r.Annotations["runbook_url"], anchor)
		}
		if !regexp.MustCompile(`(?m)^#+ ` + r.Alert + `$`).Match(doc) {
			t.Errorf("%s: docs/deployment.md has no heading %q for its runbook", r.Alert, r.Alert)
		}
		if !fires[r.Alert] {
			t.Errorf("%s: no test in idem-alerts.test.yml expects it to fire", r.Alert)
		}
	}
	if len(quiet) == 0 {
		t.Error("idem-alerts.test.yml never expects an alert to stay quiet")
	}
}
