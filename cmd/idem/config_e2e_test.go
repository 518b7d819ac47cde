package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/idemkit/idem/internal/redact"
	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// writeConfig writes text as a config file of t and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// logEvents parses every line of the gateway's log as JSON, failing the
// test on a line that is not.
func logEvents(t *testing.T, g *gatewayProc) []map[string]any {
	t.Helper()
	var events []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(g.logText()), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("a log line is not JSON (--log-format json): %q\n%s", line, g.logText())
		}
		events = append(events, ev)
	}
	return events
}

// Issue 31, item 1: a config file's store:, log-format: and otlp-endpoint:
// were read after those three flags had been copied: two gateways whose
// file said store: redis://... each kept a private memory store, and one
// key sent to both ran twice. Started from a file alone (no --store, no
// --log-format), two gateways share the store the file names: the key
// runs once; every log line is JSON, the first naming the version, the
// store and the file.
func TestConfigFileStoreIsShared(t *testing.T) {
	for name, uri := range storeURIs(t) {
		if name == "memory" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			up := newUpstream(t, 0)
			path := writeConfig(t, fmt.Sprintf("store: %s\nlog-format: json\nupstream: %s\n", uri, up.URL))
			args := []string{"--config", path, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}
			g1, g2 := launchServe(t, nil, args...), launchServe(t, nil, args...)
			g1.waitServing(t)
			g2.waitServing(t)
			key := "cfgstore-" + testenv.Prefix(t)
			first := post(t, "http://"+g1.addr, key, `{"n":1}`)
			again := post(t, "http://"+g2.addr, key, `{"n":1}`)
			if n := up.count(key); n != 1 || first.status != 201 || !again.replayed {
				t.Fatalf("one key sent to two gateways of one config file ran %d times (%d, then replayed=%v); want once, replayed by the second",
					n, first.status, again.replayed)
			}
			for _, g := range []*gatewayProc{g1, g2} {
				ev := logEvents(t, g)[0]
				if ev["msg"] != "idem: starting" || ev["store"] != redact.URL(uri) || ev["version"] == nil || !strings.Contains(fmt.Sprint(ev["config"]), path) {
					t.Errorf("the first log line is %v; want idem: starting, the version, store %s and the file %s", ev, redact.URL(uri), path)
				}
			}
		})
	}
}

// checkConfig runs idem serve --check-config=json with args and env, and
// returns its output parsed.
func checkConfigJSON(t *testing.T, env []string, args ...string) effectiveConfig {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"serve", "--check-config=json"}, args...)...)
	cmd.Env = append(withoutEnv("IDEM_ADMIN_TOKEN"), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("idem serve --check-config=json %v: %v\n%s", args, err, stderr.String())
	}
	var c effectiveConfig
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("--check-config=json printed no JSON: %v\n%s", err, out)
	}
	return c
}

// The precedence, for several settings at once and the store among them:
// a flag on the command line, then its IDEM_ variable, then the file,
// then the default. --check-config says where each value came from, and
// warns of each variable that overrides the file; a started gateway runs
// on the store the chain chose.
func TestPrecedence(t *testing.T) {
	testenv.Redis(t)
	up := newUpstream(t, 0)
	path := writeConfig(t, fmt.Sprintf("upstream: %s\nstore: redis://127.0.0.1:1/3\nlease: 1m\nwait: 2s\nretention: 2h\nlog-level: debug\n", up.URL))
	env := []string{"IDEM_STORE=redis://127.0.0.1:1/4", "IDEM_WAIT=3s", "IDEM_LOG_FORMAT=json", "IDEM_LEASE=40s"}
	c := checkConfigJSON(t, env, "--config", path, "--lease", "5s", "--store", testenv.RedisURL())
	line := func(n int) string { return fmt.Sprintf("%s:%d", path, n) }
	for name, want := range map[string]setting{
		"store":            {Value: testenv.RedisURL(), origin: origin{"flag", "--store"}, Overrides: line(2)},
		"lease":            {Value: "5s", origin: origin{"flag", "--lease"}, Overrides: line(3), Reload: true},
		"wait":             {Value: "3s", origin: origin{"env", "IDEM_WAIT"}, Overrides: line(4), Reload: true},
		"log-format":       {Value: "json", origin: origin{"env", "IDEM_LOG_FORMAT"}},
		"retention":        {Value: "2h0m0s", origin: origin{"file", line(5)}, Reload: true},
		"log-level":        {Value: "debug", origin: origin{"file", line(6)}, Reload: true},
		"upstream-timeout": {Value: "30s", origin: origin{Kind: "default"}, Reload: true},
	} {
		if got := c.Settings[name]; got != want {
			t.Errorf("%s = %+v; want %+v", name, got, want)
		}
	}
	// The flag's --store, over IDEM_STORE, over the file: the variable
	// that lost to a flag is not warned of, the ones that won are.
	if want := []string{"idem: IDEM_WAIT in the environment overrides wait at " + line(4)}; len(c.Warnings) != 1 || !strings.HasPrefix(c.Warnings[0], want[0]) {
		t.Errorf("warnings %q; want one starting %q", c.Warnings, want)
	}
	top := c.Routes[len(c.Routes)-1].Policy
	if top["lease"].Value != "5s" || top["wait"].origin != (origin{"env", "IDEM_WAIT"}) {
		t.Errorf("the top-level policy %+v; want the flag's lease and the variable's wait", top)
	}
	// Started with the same chain, without the flag's store: the variable's.
	g := launchServe(t, []string{"IDEM_STORE=" + testenv.RedisURL() + "?dial_timeout=2s", "IDEM_LOG_FORMAT=json"},
		"--config", path, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	g.waitServing(t)
	events := logEvents(t, g)
	if events[0]["store"] != testenv.RedisURL()+"?dial_timeout=2s" {
		t.Errorf("the first log line names the store %v; want IDEM_STORE's", events[0]["store"])
	}
	if !strings.Contains(g.logText(), "IDEM_STORE in the environment overrides store at "+line(2)) {
		t.Errorf("no warning that IDEM_STORE overrides the file:\n%s", g.logText())
	}
	if a := post(t, "http://"+g.addr, "precedence-"+testenv.Prefix(t), "{}"); a.status != 201 {
		t.Errorf("a request = %d %s; want 201 on IDEM_STORE's Redis", a.status, a.body)
	}
}

// --check-config prints the configuration a start would run, secrets
// hidden, without contacting the store, and exits 0; a configuration that
// a start would refuse exits 2 with the same error and prints nothing.
func TestCheckConfig(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(tokens, []byte("ops read-write filesecret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, `upstream: https://user:upsecret@api.example.com/?code=AZFUNCSECRET1
store: redis://:storesecret@127.0.0.1:1/0
reconcile-url: https://api.example.com/lookup/{key}?access_token=urlsecret&code=S2secret&key=GOOGLEKEY3&sig=SASSIG4
reconcile-token: recsecret
routes:
  - match: POST /v1/exports
    wait: 5m
  - match: POST /v1/search
    pass-through: true
admin-hosts: [console.example.com, 'localhost:8888']
admin-tokens-file: `+tokens+`
`)
	env := []string{"IDEM_ADMIN_TOKEN=adminsecret-0123456789"}
	for _, mode := range []string{"--check-config", "--check-config=json"} {
		cmd := exec.Command(binary, "serve", mode, "--config", path)
		cmd.Env = append(withoutEnv("IDEM_ADMIN_TOKEN"), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("idem serve %s: %v\n%s", mode, err, out)
		}
		for _, secret := range []string{"upsecret", "storesecret", "urlsecret", "recsecret", "adminsecret", "filesecret", "AZFUNCSECRET1", "S2secret", "GOOGLEKEY3", "SASSIG4"} {
			if strings.Contains(string(out), secret) {
				t.Errorf("idem serve %s printed the secret %s:\n%s", mode, secret, out)
			}
		}
		for _, want := range []string{"POST /v1/exports", "5m0s", path + ":7", "IDEM_ADMIN_TOKEN", path + ":3", "/lookup/{key}?access_token=xxxxx", "sig=xxxxx"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("idem serve %s does not say %q:\n%s", mode, want, out)
			}
		}
	}
	c := checkConfigJSON(t, env, "--config", path)
	if len(c.Routes) != 3 || c.Routes[2].Match != "" || c.Routes[0].Source != path+":6" {
		t.Fatalf("routes %+v; want the file's two, then the top level's", c.Routes)
	}
	wait, lease := c.Routes[0].Policy["wait"], c.Routes[0].Policy["lease"]
	if wait.Value != "5m0s" || wait.origin != (origin{"file", path + ":7"}) || lease.Value != "30s" || lease.Kind != "inherited" {
		t.Errorf("exports' wait %+v and lease %+v; want the file's 5m and the inherited 30s", wait, lease)
	}
	if p := c.Routes[1].Policy; len(p) != 2 || p["pass-through"].Value != true || p["upstream-timeout"].Value != "30s" || p["upstream-timeout"].Kind != "inherited" {
		t.Errorf("the pass-through route's policy %+v; want pass-through and the upstream timeout it runs with, inherited", p)
	}
	if s := c.Settings["admin-token"]; s.Value != "xxxxx" || s.origin != (origin{"env", "IDEM_ADMIN_TOKEN"}) {
		t.Errorf("admin-token = %+v; want masked, from IDEM_ADMIN_TOKEN", s)
	}
	// admin's flags go through the same chain: the file's list, and the
	// tokens file's path (its tokens are never printed, above).
	if s := c.Settings["admin-hosts"]; s.Value != "console.example.com,localhost:8888" || s.origin != (origin{"file", path + ":10"}) || s.Reload {
		t.Errorf("admin-hosts = %+v; want the file's list, from line 10, fixed at start", s)
	}
	if s := c.Settings["admin-tokens-file"]; s.Value != tokens || s.origin != (origin{"file", path + ":11"}) {
		t.Errorf("admin-tokens-file = %+v; want the file's path, from line 11", s)
	}
	for _, bad := range []struct{ text, want string }{
		{"upstream: http://x\nstore: redis://127.0.0.1:notaport\n", "--store"},
		{"upstream: http://x\nstore: postgres://u@h/db?schema=Bad\n", "schema"},
		{"upstream: http://x\nstore: redis://127.0.0.1:1/7?db=3&prefix=x\n", "/7 in the path and db=3"},
		{"upstream: http://x\nstore: redis://127.0.0.1:1/7?db=3&prefix=x&client=go-redis\n", "/7 in the path and db=3"},
		{"upstream: http://x\nschema: other\n", "schema"},
		{"upstream: http://x\nroutes:\n  - match: POST /{a}/x\n  - match: POST /x/{b}\n", "idem.yaml:4: routes[1].match"},
		{"upstream: http://x\nreplay-headers: [Set-Cookie]\n", "Set-Cookie"},
		{"upstream: http://x\nlisten: nonsense\n", "--listen \"nonsense\""},
		{"upstream: http://x\nupstream-timeout: -1s\n", "idem.yaml:2"},
		{"upstream: http://x\nroutes:\n  - match: POST /disjoint\n    methods: [PATCH]\n", "idem.yaml:4: routes[0].methods"},
		{"upstream: http://x\nroutes:\n  - match: POST api.example.com/v2/orders\n", "idem.yaml:3: routes[0].match: \"POST api.example.com/v2/orders\" names the host"},
	} {
		cmd := exec.Command(binary, "serve", "--check-config", "--config", writeConfig(t, bad.text))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || stdout.Len() > 0 || !strings.Contains(stderr.String(), bad.want) {
			t.Errorf("--check-config of %q: %v, stdout %q, stderr %q; want exit 2, nothing printed, the error naming %q",
				bad.text, err, stdout.String(), stderr.String(), bad.want)
		}
	}
}

// A reload reads the same chain: a variable still wins over the file,
// and is warned of again; a restart-only setting changed in the file is
// refused by name, not ignored.
func TestReloadUsesTheSameChain(t *testing.T) {
	up := newUpstream(t, 0)
	path := writeConfig(t, "log-format: json\nrequire-key: false\nwait: 1s\n")
	g := launchServe(t, []string{"IDEM_REQUIRE_KEY=true"}, "--config", path, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	g.waitServing(t)
	g.waitForLog(t, "IDEM_REQUIRE_KEY in the environment overrides require-key at "+path+":2", 1)
	g.waitForLog(t, `"keyless_requests":"refused (400 key_required)"`, 1) // the serving line says what runs, not what the file says
	if a := post(t, "http://"+g.addr, "", "{}"); a.status != http.StatusBadRequest {
		t.Fatalf("no key, IDEM_REQUIRE_KEY=true over the file's false: %d; want 400", a.status)
	}
	reload := func(text string) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		g.cmd.Process.Signal(syscall.SIGHUP)
	}
	reload("log-format: json\nrequire-key: false\nwait: 2s\n")
	g.waitForLog(t, "configuration reloaded", 1)
	g.waitForLog(t, "IDEM_REQUIRE_KEY in the environment overrides require-key", 2)
	if a := post(t, "http://"+g.addr, "", "{}"); a.status != http.StatusBadRequest {
		t.Fatalf("after the reload, no key: %d; want 400 (the variable still wins)", a.status)
	}
	reload("log-format: text\nrequire-key: false\nwait: 2s\n")
	g.waitForLog(t, "reload failed", 1)
	g.waitForLog(t, "log-format changed, which a reload cannot apply", 1)
}

// The shipped deploy/idem.yaml, started as docs/production.md says (with
// deploy/systemd/idem.env as the unit's environment, its IDEM_CONFIG
// pointing at the file): every variable names a flag, none overrides the
// file, the gateway runs on the store the file names (two of them share
// it), and a route of the file answers and replays. Only the addresses
// are flags, free ports and this test's upstream.
func TestShippedConfigRuns(t *testing.T) {
	testenv.Redis(t)
	if testenv.RedisURL() != "redis://127.0.0.1:6379/0" {
		t.Skip("deploy/idem.yaml names redis://127.0.0.1:6379/0, not this run's Redis")
	}
	envFile, err := os.ReadFile("../../deploy/systemd/idem.env")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	for _, name := range serveFlagNames(t) {
		flags[name] = true
	}
	var env []string
	for _, m := range regexp.MustCompile(`(?m)^(#?)IDEM_([A-Z_]+)=(.*)$`).FindAllStringSubmatch(string(envFile), -1) {
		commented, name, value := m[1] == "#", m[2], m[3]
		if flag := strings.ToLower(strings.ReplaceAll(name, "_", "-")); !flags[flag] {
			t.Errorf("idem.env: IDEM_%s names no flag of idem serve (--%s)", name, flag)
		}
		if name == "CONFIG" {
			if commented || value != "/etc/idem/idem.yaml" {
				t.Fatalf("idem.env: IDEM_CONFIG=%s (commented %v); want /etc/idem/idem.yaml, as the docs install it", value, commented)
			}
			value = "../../deploy/idem.yaml"
		}
		if !commented {
			env = append(env, "IDEM_"+name+"="+value)
		}
	}
	up := newUpstream(t, 0)
	args := []string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--upstream", up.URL}
	g1, g2 := launchServe(t, env, args...), launchServe(t, env, args...)
	g1.waitServing(t)
	g2.waitServing(t)
	for _, g := range []*gatewayProc{g1, g2} {
		events := logEvents(t, g)
		if events[0]["store"] != "redis://127.0.0.1:6379/0" {
			t.Errorf("the first log line names the store %v; want the file's redis://127.0.0.1:6379/0", events[0]["store"])
		}
		if strings.Contains(g.logText(), "overrides") {
			t.Errorf("the shipped idem.env overrides the shipped idem.yaml:\n%s", g.logText())
		}
	}
	id := "shipped-" + testenv.Prefix(t)
	order := func(g *gatewayProc) answer {
		req, _ := http.NewRequest(http.MethodPost, "http://"+g.addr+"/v1/orders", strings.NewReader(`{"request_id":"`+id+`","sent_at":"now"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer shipped")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(body), resp.Header}
	}
	first, again := order(g1), order(g2)
	if first.status != 201 || !again.replayed || again.body != first.body || up.count(id) != 1 {
		t.Fatalf("an order keyed by its request_id: %d, then replayed=%v on the other gateway, %d executions; want 201, replayed, once",
			first.status, again.replayed, up.count(id))
	}
}
