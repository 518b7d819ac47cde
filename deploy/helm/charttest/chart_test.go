package charttest

import (
	"encoding/base64"
	"os"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	chartDir   = "../idem"
	alertsFile = "../../prometheus/idem-alerts.yml"
	// configPath is where the image's command reads the config file
	// (deploy/image: idem serve --config /etc/idem/idem.yaml).
	configPath = "/etc/idem/idem.yaml"
	token      = "t0ken-of-the-admin-api"
)

func load(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// render is helm template of the chart with values, as release "pay" in
// namespace "payments": the manifests by file name.
func render(t *testing.T, values map[string]any) (map[string]string, error) {
	t.Helper()
	c := load(t)
	vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{Name: "pay", Namespace: "payments", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	return engine.Render(c, vals)
}

func decode(t *testing.T, files map[string]string, name string, v any) {
	t.Helper()
	text, ok := files["idem/templates/"+name]
	if !ok || strings.TrimSpace(text) == "" {
		t.Fatalf("%s was not rendered", name)
	}
	if err := yaml.UnmarshalStrict([]byte(text), v); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, text)
	}
}

// helm lint passes: no error, no warning.
func TestChartLints(t *testing.T) {
	l := lint.All(chartDir, map[string]any{"adminToken": token}, "payments", false)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}

// Issue 36, item 6: helm template renders a Deployment probed on the
// admin port, non-root on a read-only root, reading the config file the
// ConfigMap holds where the image's command looks, with the admin token
// from the Secret (never in the Deployment); a Service, a ServiceMonitor
// scraping the admin port as job idem, and the alert rules of
// deploy/prometheus/idem-alerts.yml as they are.
func TestChartRendersWhatItSays(t *testing.T) {
	files, err := render(t, map[string]any{"adminToken": token,
		"config": map[string]any{"upstream": "http://payments-api:3000", "store": "redis://redis:6379/0", "admin-token": "not-here"}})
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	decode(t, files, "deployment.yaml", &d)
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers; want idem's", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != "ghcr.io/idemkit/idem:0.1.0" || len(c.Command) != 0 || len(c.Args) != 0 {
		t.Errorf("image %q, command %q, args %q; want the chart's appVersion, with the image's own entrypoint and command", c.Image, c.Command, c.Args)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 8080 || ports["admin"] != 9090 {
		t.Errorf("container ports %v; want http 8080 and admin 9090", ports)
	}
	for name, probe := range map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != name || probe.HTTPGet.Port.String() != "admin" {
			t.Errorf("probe %s = %+v; want an HTTP GET of %s on the admin port", name, probe, name)
		}
	}
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 {
		t.Errorf("pod securityContext %+v; want runAsNonRoot, user 65532", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v; want readOnlyRootFilesystem, runAsNonRoot, no privilege escalation, every capability dropped", sc)
	}

	// The config file: mounted where the image's command reads it.
	var cm corev1.ConfigMap
	decode(t, files, "configmap.yaml", &cm)
	var mounted string
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				mounted = m.MountPath
			}
		}
	}
	key := strings.TrimPrefix(configPath, mounted+"/")
	if mounted == "" || key == configPath || cm.Data[key] == "" {
		t.Fatalf("the ConfigMap %s is mounted at %q, with keys %v; want %s in it", cm.Name, mounted, cm.Data, configPath)
	}
	var config map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data[key]), &config); err != nil {
		t.Fatal(err)
	}
	if config["listen"] != "0.0.0.0:8080" || config["admin"] != "0.0.0.0:9090" || config["upstream"] != "http://payments-api:3000" ||
		config["store"] != "redis://redis:6379/0" || config["admin-token"] != nil || config["require-key"] != true {
		t.Errorf("idem.yaml = %v; want the values' config on the chart's ports, require-key (a POST without a key is not forwarded unprotected), and no admin token", config)
	}

	// The token: in the Secret, referenced by the Deployment, never inlined.
	var secret corev1.Secret
	decode(t, files, "secret.yaml", &secret)
	if string(secret.Data["admin-token"]) != token {
		t.Errorf("the Secret holds %q; want the admin token", secret.Data["admin-token"])
	}
	var ref *corev1.SecretKeySelector
	for _, e := range c.Env {
		if e.Name == "IDEM_ADMIN_TOKEN" && e.ValueFrom != nil {
			ref = e.ValueFrom.SecretKeyRef
		}
	}
	if ref == nil || ref.Name != secret.Name || ref.Key != "admin-token" {
		t.Errorf("IDEM_ADMIN_TOKEN comes from %+v; want the Secret %s's admin-token", ref, secret.Name)
	}
	// GOMEMLIMIT is the container's memory limit: the collector, not the
	// kernel's OOM killer, holds the heap under it.
	var limit *corev1.ResourceFieldSelector
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil {
			limit = e.ValueFrom.ResourceFieldRef
		}
	}
	if limit == nil || limit.Resource != "limits.memory" || !limit.Divisor.IsZero() && limit.Divisor.Value() != 1 {
		t.Errorf("GOMEMLIMIT comes from %+v; want the container's limits.memory, in bytes", limit)
	}
	for name, text := range files {
		if !strings.HasSuffix(name, "secret.yaml") && (strings.Contains(text, token) || strings.Contains(text, base64.StdEncoding.EncodeToString([]byte(token)))) {
			t.Errorf("%s holds the admin token", name)
		}
	}

	// The Service and the ServiceMonitor reach the pod's ports.
	var svc corev1.Service
	decode(t, files, "service.yaml", &svc)
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s; the pods are %v", k, v, d.Spec.Template.Labels)
		}
	}
	svcPorts := map[string]string{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = p.TargetPort.String()
	}
	if svcPorts["http"] != "http" || svcPorts["admin"] != "admin" {
		t.Errorf("Service ports %v; want http and admin to the container's", svcPorts)
	}
	var sm struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			Selector  struct{ MatchLabels map[string]string } `json:"selector"`
			Endpoints []struct {
				Port, Path, Interval string
				Relabelings          []map[string]string
			}
		}
	}
	decode(t, files, "servicemonitor.yaml", &sm)
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" ||
		!reflect.DeepEqual(sm.Spec.Endpoints[0].Relabelings, []map[string]string{{"action": "replace", "targetLabel": "job", "replacement": "idem"}}) {
		t.Errorf("ServiceMonitor endpoints %+v; want /metrics of the admin port, as job idem", sm.Spec.Endpoints)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %s=%s; the Service is %v", k, v, svc.Labels)
		}
	}

	// The rules: the alert file's, one source.
	var rule struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       map[string]any `json:"spec"`
	}
	decode(t, files, "prometheusrule.yaml", &rule)
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var alerts map[string]any
	if err := yaml.Unmarshal(b, &alerts); err != nil {
		t.Fatal(err)
	}
	if rule.Kind != "PrometheusRule" || !reflect.DeepEqual(rule.Spec, alerts) {
		t.Errorf("the PrometheusRule's spec differs from %s", alertsFile)
	}
	var inChart []byte
	for _, f := range load(t).Files {
		if f.Name == "files/idem-alerts.yml" {
			inChart = f.Data
		}
	}
	if string(inChart) != string(b) {
		t.Errorf("the chart's files/idem-alerts.yml differs from %s (%d bytes, %d): it must be the same file", alertsFile, len(inChart), len(b))
	}
}

// The chart refuses what idem would refuse, or what would run a key
// twice: no admin token, a token shorter than idem takes, and replicas on the memory store. With a Secret
// of the operator's, it makes none and refers to that one.
func TestChartRefusesAndRefers(t *testing.T) {
	for what, values := range map[string]map[string]any{
		"adminToken":                      {},
		"adminToken is shorter than 16":   {"adminToken": "s3cret"},
		"replicas > 1 with store: memory": {"adminToken": token, "replicas": 3},
	} {
		if _, err := render(t, values); err == nil || !strings.Contains(err.Error(), what) {
			t.Errorf("values %v rendered (%v); want an error about %s", values, err, what)
		}
	}
	files, err := render(t, map[string]any{"existingSecret": "idem-admin", "replicas": 3, "config": map[string]any{"store": "postgres://db/idem"}})
	if err != nil {
		t.Fatal(err)
	}
	if text := files["idem/templates/secret.yaml"]; strings.TrimSpace(text) != "" {
		t.Errorf("with existingSecret the chart renders a Secret:\n%s", text)
	}
	var d appsv1.Deployment
	decode(t, files, "deployment.yaml", &d)
	if env := d.Spec.Template.Spec.Containers[0].Env; len(env) != 2 || env[0].ValueFrom.SecretKeyRef.Name != "idem-admin" || *d.Spec.Replicas != 3 {
		t.Errorf("with existingSecret idem-admin and 3 replicas: env %+v, %d replicas", env, *d.Spec.Replicas)
	}
}
