package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// SIGHUP reloads the config file: a good file is applied to the next
// requests; a bad one, or one that changes what only a restart can, keeps
// the running configuration, says why in the log and counts in the
// metrics.
func TestSIGHUPReloadsTheConfigFile(t *testing.T) {
	up := newUpstream(t, 0)
	path := filepath.Join(t.TempDir(), "idem.yaml")
	write := func(text string) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("store: memory\nroutes:\n  - match: POST /charges\n    require-key: true\n")
	g := startGateway(t, "--config", path, "--upstream", up.URL)
	base := "http://" + g.addr
	if a := post(t, base, "", "{}"); a.status != http.StatusBadRequest {
		t.Fatalf("a charge without a key = %d %s; want 400 from the file's route", a.status, a.body)
	}
	hup := func() {
		if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	write("store: memory\n")
	hup()
	g.waitForLog(t, "configuration reloaded", 1)
	if a := post(t, base, "", "{}"); a.status != http.StatusCreated {
		t.Fatalf("after the reload, a charge without a key = %d %s; want 201", a.status, a.body)
	}
	write("store: memory\nroutes:\n  - match: POST /charges\n    require-kee: true\n")
	hup()
	g.waitForLog(t, "reload failed", 1)
	write("store: redis://127.0.0.1:1\nroutes:\n  - match: POST /charges\n    require-key: true\n")
	hup()
	g.waitForLog(t, "reload failed", 2)
	write("store: memory\nroutes:\n  - match: POST api.example.com/charges\n    require-key: true\n")
	hup()
	g.waitForLog(t, "reload failed", 3)
	logs := g.logText()
	for _, want := range []string{"idem.yaml:4: routes[0].require-kee: unknown field", "store changed, which a reload cannot apply: restart",
		`idem.yaml:3: routes[0].match: \"POST api.example.com/charges\" names the host`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
		}
	}
	if a := post(t, base, "", "{}"); a.status != http.StatusCreated {
		t.Fatalf("after three bad reloads, a charge without a key = %d %s; want 201 (the running configuration)", a.status, a.body)
	}
	resp, err := http.Get("http://" + g.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`idem_config_reloads_total{result="success"} 1`, `idem_config_reloads_total{result="failure"} 3`,
		"idem_config_last_reload_successful 0"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM = %v; want 0\n%s", err, g.logText())
	}
}
