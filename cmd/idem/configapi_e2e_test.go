package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// getConfig asks the gateway's GET /v1/config with the bearer token (none
// when ""): its status and, on 200, the document.
func getConfig(t *testing.T, g *gatewayProc, token string) (int, effectiveConfig, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+g.admin+"/v1/config", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var c effectiveConfig
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatalf("GET /v1/config: %v\n%s", err, body)
		}
	}
	return resp.StatusCode, c, string(body)
}

// Issue 36, item 5: GET /v1/config serves the document --check-config=json
// prints for the same flags, variables and file (one code path: each
// value with its source, secrets masked), to any token, read-only too,
// and none to a caller without one; after a reload, the new one; after a
// reload that failed, still the running one.
func TestConfigEndpointIsCheckConfigs(t *testing.T) {
	up := newUpstream(t, 0)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "admin-tokens")
	if err := os.WriteFile(tokens, []byte("viewer read-only viewer-s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, "log-format: json\nwait: 1s\nreconcile-url: http://user:pw@127.0.0.1:1/lookup/{key}?token=s3cret\n"+
		"routes:\n  - match: POST /charges\n    name: charges\n    require-key: true\n")
	env := []string{"IDEM_ADMIN_TOKEN=admin-secret-token", "IDEM_LEASE=45s"}
	args := []string{"--config", path, "--upstream", up.URL, "--admin-tokens-file", tokens, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}
	g := launchServe(t, env, args...)
	g.waitServing(t)

	status, served, body := getConfig(t, g, "viewer-s3cret-token")
	if status != http.StatusOK {
		t.Fatalf("GET /v1/config with a read-only token: %d %s; want 200", status, body)
	}
	if want := checkConfigJSON(t, env, args...); !reflect.DeepEqual(served, want) {
		t.Fatalf("GET /v1/config = %+v;\nwant what --check-config=json prints: %+v", served, want)
	}
	for _, secret := range []string{"admin-secret-token", "viewer-s3cret-token", "s3cret", "pw@"} {
		if strings.Contains(body, secret) {
			t.Errorf("GET /v1/config shows a secret (%s): %s", secret, body)
		}
	}
	if s := served.Settings["lease"]; s.Value != "45s" || s.Kind != "env" || s.Where != "IDEM_LEASE" {
		t.Errorf("lease = %+v; want 45s from IDEM_LEASE", s)
	}
	if status, _, _ := getConfig(t, g, ""); status != http.StatusUnauthorized {
		t.Errorf("GET /v1/config without a token: %d; want 401", status)
	}

	reload := func(text string, logged string, n int) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		g.cmd.Process.Signal(syscall.SIGHUP)
		g.waitForLog(t, logged, n)
	}
	reload("log-format: json\nwait: 3s\nreconcile-url: http://127.0.0.1:1/lookup/{key}\n", "configuration reloaded", 1)
	_, served, _ = getConfig(t, g, "admin-secret-token")
	if s := served.Settings["wait"]; s.Value != "3s" || s.Where != path+":2" || len(served.Routes) != 1 {
		t.Errorf("after the reload: wait %+v, %d routes; want 3s at %s:2 and only the top level's", s, len(served.Routes), path)
	}
	reload("log-format: text\nwait: 5s\n", "reload failed", 1)
	if _, served, _ = getConfig(t, g, "admin-secret-token"); served.Settings["wait"].Value != "3s" {
		t.Errorf("after a failed reload: wait %+v; want the running 3s", served.Settings["wait"])
	}
}
