package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/store/memstore"
)

// checkConfig loads idem serve's settings from args and the config file
// text (written as cfg.yaml, whose path is appended as --config), and
// builds a gateway on a memory store with them: every error a start
// would meet before it listens.
func checkConfig(t *testing.T, text string, args ...string) (*serveSetup, *gateway.Gateway, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cfg.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args, "--config") {
		args = append(args, "--config", path)
	}
	s, err := loadServe(args)
	if err != nil {
		return nil, nil, err
	}
	cfg := s.cfg
	cfg.Store, _ = memstore.New(nil)
	cfg.Logger = slog.New(slog.DiscardHandler)
	g, err := gateway.New(cfg)
	if err != nil {
		err = fmt.Errorf("%w: %w", errUsage, err) // as validate: a start exits 2
	}
	return s, g, s.settings.explain(err)
}

// A bad file names the file, the line and the field, and is a usage
// error (exit status 2: restarting cannot fix it).
func TestConfigErrorsNameLineAndField(t *testing.T) {
	const up = "upstream: http://127.0.0.1:1\n"
	for _, c := range []struct{ text, want string }{
		{up + "lease: 30s\nleese: 5s\n", "cfg.yaml:3: leese: unknown field"},
		{up + "config: other.yaml\n", "cfg.yaml:2: config: unknown field"},
		{up + "lease: 30s\nlease: 5s\n", "cfg.yaml:3: lease: set twice (first at line 2)"},
		{up + "lease: [1, 2]\n", "cfg.yaml:2: lease: want a single value"},
		{up + "lease: 5 min\n", `cfg.yaml:2: lease: "5 min" is not a duration: want a number with a unit`},
		{up + "lease: 30\n", `cfg.yaml:2: lease: "30" is not a duration: want a number with a unit`},
		{up + "require-key: maybe\n", `cfg.yaml:2: require-key: invalid value "maybe"`},
		{up + "methods: {a: b}\n", "cfg.yaml:2: methods: want a list"},
		{up + "takeover: maybe\n", `--takeover "maybe": want unknown or run (set at ` + "CFG:2)"},
		{up + "lease: [\n", "cfg.yaml: yaml: line 2: did not find expected node content"},
		{up + "routes:\n  - match: POST /a\n    lesae: 1s\n", "cfg.yaml:4: routes[0].lesae: unknown field; the fields here are match, name, pass-through"},
		{up + "routes:\n  - match: POST /a\n    lease: 5 min\n", `cfg.yaml:4: routes[0].lease: "5 min" is not a duration`},
		{up + "routes:\n  - match: POST /a\n    require-key: yes\n", `cfg.yaml:4: routes[0].require-key: "yes": want true or false`},
		{up + "routes:\n  - match: POST /a\n    methods: POST\n", "cfg.yaml:4: routes[0].methods: want a list"},
		{up + "routes:\n  - match: POST /a\n    wait:\n", "cfg.yaml:4: routes[0].wait: no value"},
		{up + "routes:\n  match: POST /a\n", "cfg.yaml:3: routes: want a list"},
		{up + "routes:\n  - match: POST /a/{x\n", "cfg.yaml:3: routes[0].match: "},
		{up + "routes:\n  - match: POST /{a}/x\n  - match: POST /x/{b}\n", `cfg.yaml:4: routes[1].match: "POST /x/{b}" conflicts with routes[0] "POST /{a}/x" (CFG:3)`},
		{up + "routes:\n  - match: POST /a\n  - match: POST api.example.com/v2/orders\n", `cfg.yaml:4: routes[1].match: "POST api.example.com/v2/orders" names the host "api.example.com", which cannot be honoured: ` +
			`the gateway forwards every request to its one upstream with the upstream's own Host, so a request for any Host reaches the same endpoint, ` +
			`and one sent with another Host (an alias, an IP address) would escape the route; write the pattern without the host: "POST /v2/orders"`},
		{up + "routes:\n  - match: POST /a\n    fingerprint:\n      ignore: [request_id]\n", "cfg.yaml:5: routes[0].fingerprint.ignore[0]: jsonptr: \"request_id\" does not start with /"},
		{up + "routes:\n  - match: POST /a\n    statuses:\n      store: [409]\n      release: [5xx, 700]\n", "cfg.yaml:6: routes[0].statuses.release[1]: \"700\": want a status"},
		{up + "routes:\n  - match: POST /a\n    key-from: json:/id\n    pass-through: true\n", "cfg.yaml:5: routes[0].pass-through: a pass-through route"},
		{up + "routes:\n  - match: POST /a\n    reconcile-url: http://x/{key}\n", "cfg.yaml:3: routes[0].name: a route with its own reconcile-url needs a name"},
		{up + "routes:\n  - match: POST /a\n    name: a\n    reconcile-url: http://{key}.lookup.internal/x\n", `cfg.yaml:5: routes[0].reconcile-url: gateway: reconcile-url "http://{key}.lookup.internal/x" has {key} in its host or port`},
		{up + "reconcile-url: https://{tenant}.lookup.internal/{key}\n", `--reconcile-url "https://{tenant}.lookup.internal/{key}" has {tenant} in its host or port`},
	} {
		_, _, err := checkConfig(t, c.text)
		if err == nil {
			t.Errorf("%s: no error; want %q", c.text, c.want)
			continue
		}
		got, want := withoutDir(err), strings.ReplaceAll(c.want, "CFG", "cfg.yaml")
		if !strings.Contains(got, want) || !errors.Is(err, errUsage) {
			t.Errorf("%s:\n got %v\nwant %q, a usage error", c.text, got, want)
		}
	}
}

// A flag on the command line, then its IDEM_ variable, win over the
// file's top-level setting; the file wins over the flag's default.
func TestFlagsAndVariablesOverrideTheFile(t *testing.T) {
	t.Setenv("IDEM_WAIT", "3s")
	s, _, err := checkConfig(t, "upstream: http://file.example\nlease: 1m\nwait: 2s\nretention: 2h\nmethods: [put, PATCH]\n",
		"--lease", "5s")
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.Lease != 5*time.Second || s.cfg.Wait != 3*time.Second || s.cfg.Retention != 2*time.Hour ||
		s.cfg.Upstream.Host != "file.example" || !slices.Equal(s.cfg.Methods, []string{"PUT", "PATCH"}) ||
		s.cfg.UpstreamTimeout != 30*time.Second {
		t.Fatalf("lease %v, wait %v, retention %v, upstream %v, methods %v, upstream timeout %v; "+
			"want the flag's 5s, the variable's 3s, the file's 2h, file.example, [PUT PATCH] and the default 30s",
			s.cfg.Lease, s.cfg.Wait, s.cfg.Retention, s.cfg.Upstream, s.cfg.Methods, s.cfg.UpstreamTimeout)
	}
}

// An IDEM_ variable that sets nothing is refused at start, naming it: a
// misspelt one (the store left at its default), one for a flag that only
// the command line gives; the harness's own variables are left alone.
func TestStrayVariablesAreRefused(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"IDEM_STORE_URL", "IDEM_STORE_URL in the environment names no setting of idem serve"},
		{"IDEM_LEAS", "IDEM_LEAS in the environment names no setting"},
		{"IDEM_CHECK_CONFIG", "--check-config is taken only from the command line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.name, "redis://127.0.0.1:6379")
			_, _, err := checkConfig(t, "upstream: http://file.example\n")
			if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a usage error saying %q", err, tc.want)
			}
		})
	}
	t.Setenv("IDEM_TEST_ANYTHING", "1")
	if _, _, err := checkConfig(t, "upstream: http://file.example\n"); err != nil {
		t.Fatalf("a harness variable refused: %v", err)
	}
}

// deploy/idem.yaml, the example the docs and the systemd unit point at,
// loads and builds a gateway.
func TestExampleConfigLoads(t *testing.T) {
	s, _, err := checkConfig(t, "", "--config", "../../deploy/idem.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, rt := range s.cfg.Routes {
		patterns = append(patterns, rt.Pattern)
	}
	want := []string{"POST /v1/charges", "POST /v1/exports", "POST /v1/search", "POST /v1/orders", "POST /v1/charges/{id}/refunds"}
	if !slices.Equal(patterns, want) || !s.cfg.Routes[2].PassThrough || *s.cfg.Routes[1].Wait != 5*time.Minute {
		t.Fatalf("routes %q; want %q, search passed through, exports waiting 5m", patterns, want)
	}
}

// The config files a user copies (deploy/idem.yaml, and every whole file
// the docs show) load, and refuse a POST without a key rather than forward
// it unprotected: a refund or an order sent without a key and retried would
// run twice, and a route added later would start out unprotected.
func TestExampleConfigsRequireKeys(t *testing.T) {
	files := map[string]string{}
	text, err := os.ReadFile("../../deploy/idem.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files["deploy/idem.yaml"] = string(text)
	whole := regexp.MustCompile("(?ms)^```yaml\n(upstream: .*?)^```")
	for _, page := range []string{"docs/configuration.md", "docs/gateway.md"} {
		src, err := os.ReadFile("../../" + page)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range whole.FindAllStringSubmatch(string(src), -1) {
			files[fmt.Sprintf("%s, file %d", page, i+1)] = m[1]
		}
	}
	if len(files) < 3 {
		t.Fatalf("found %d config files; want deploy/idem.yaml and one in each page", len(files))
	}
	for name, text := range files {
		s, _, err := checkConfig(t, text)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !s.cfg.RequireKey {
			t.Errorf("%s: a POST without a key is forwarded unprotected: set require-key: true at the top level", name)
		}
		for _, rt := range s.cfg.Routes {
			if !rt.PassThrough && rt.RequireKey != nil && !*rt.RequireKey {
				t.Errorf("%s: route %q forwards a POST without a key unprotected", name, rt.Pattern)
			}
		}
	}
}

// Every name restartOnly holds is a flag of idem serve: the reload column
// of docs/reference/config.md is written from it, and a misspelt name would
// mark its setting as applied by a reload while a reload refuses it.
func TestRestartOnlyNamesFlags(t *testing.T) {
	flags := serveFlagNames(t)
	for _, name := range restartOnly {
		if !slices.Contains(flags, name) {
			t.Errorf("restartOnly holds %q, which is no flag of idem serve", name)
		}
	}
}

// Issue 31, items 5 and 8: the admin API's names and tokens file come
// from the file like any flag, --admin-hosts as a YAML list; a bad name
// refuses to start, naming the setting.
func TestConfigAdminHostsAndTokensFile(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(tokens, []byte("ops read-write t0ken-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, _, err := checkConfig(t, "upstream: http://127.0.0.1:1\nadmin-hosts: [console.example.com, 'localhost:8888']\nadmin-tokens-file: "+tokens+"\n")
	if err != nil || !slices.Equal(s.cfg.AdminHosts, []string{"console.example.com", "localhost:8888"}) || s.cfg.AdminTokensFile != tokens {
		t.Fatalf("admin-hosts and admin-tokens-file from the file: %+v, %v", s, err)
	}
	if _, _, err := checkConfig(t, "upstream: http://127.0.0.1:1\nadmin-hosts: [https://console.example.com]\n"); err == nil || !strings.Contains(err.Error(), "--admin-hosts") {
		t.Fatalf("admin-hosts with a scheme = %v; want an error naming --admin-hosts", err)
	}
}

// A value idem serve cannot honour as written is refused at start, naming
// the setting (and, from the file, its line): never replaced by a default
// or ignored while --check-config shows it. loadServe is what both a
// start and --check-config run, so both refuse these.
func TestUnhonourableSettingsAreRefused(t *testing.T) {
	const up = "upstream: http://127.0.0.1:1\n"
	for _, c := range []struct {
		text string
		args []string
		want string
	}{
		// A route that takes a method it does not protect.
		{up + "routes:\n  - match: POST /disjoint\n    methods: [PATCH]\n", nil, "cfg.yaml:4: routes[0].methods: the route matches POST requests only"},
		{up + "routes:\n  - match: GET /getroute\n    lease: 1m\n", nil, "cfg.yaml:3: routes[0].match: the route matches GET requests (and HEAD"},
		{up + "methods: [PUT]\nroutes:\n  - match: POST /r\n    require-key: true\n", nil, "routes[0].match: the route matches POST requests only"},
		// Negative and zero durations and counts, which meant a default.
		{up, []string{"--upstream-timeout", "-1s"}, "--upstream-timeout -1s: want a positive duration"},
		{up + "upstream-timeout: -1s\n", nil, "--upstream-timeout -1s: want a positive duration (set at CFG:2)"},
		{up, []string{"--lease", "0"}, "--lease 0s: want a positive duration"},
		{up, []string{"--lease", "500us"}, "--lease 500µs is under the 1ms resolution"},
		// Longer than a store keeps (store.MaxDuration): the record ended at once.
		{up, []string{"--lease", "2562047h"}, "--lease 2562047h0m0s is above 87600h0m0s, the longest a store keeps"},
		{up + "retention: 87601h\n", nil, "--retention 87601h0m0s is above 87600h0m0s, the longest a store keeps (set at CFG:2)"},
		{up, []string{"--key-retention", "100000h"}, "--key-retention 100000h0m0s is above 87600h0m0s"},
		{up + "routes:\n  - match: POST /r\n    retention: 87601h\n", nil, "cfg.yaml:4: routes[0].retention: 87601h0m0s is above 87600h0m0s"},
		{up + "retention: 0s\n", nil, "--retention 0s: want a positive duration (set at CFG:2)"},
		{up + "retention: -5s\n", nil, "--retention -5s: want a positive duration (set at CFG:2)"},
		{up, []string{"--upstream-timeout", "0"}, "--upstream-timeout 0s: want a positive duration"},
		{up, []string{"--read-timeout", "0"}, "--read-timeout 0s: want a positive duration"},
		{up, []string{"--idle-timeout", "0"}, "--idle-timeout 0s: want a positive duration"},
		{up, []string{"--reconcile-timeout", "0", "--reconcile-url", "http://127.0.0.1:1/{key}"}, "--reconcile-timeout 0s: want a positive duration"},
		{up, []string{"--max-conns", "0"}, "--max-conns 0: want a positive number"},
		{up + "max-conns: -1\n", nil, "--max-conns -1: want a positive number"},
		{up, []string{"--key-retention", "-1s"}, "--key-retention -1s: want a positive duration, or 0"},
		{up, []string{"--wait", "-1s"}, "--wait -1s: want a positive duration, or 0"},
		{up, []string{"--reconcile-every", "-1s", "--reconcile-url", "http://127.0.0.1:1/{key}"}, "--reconcile-every -1s"},
		// Empty lists and addresses.
		{up, []string{"--methods", ""}, "--methods \"\": an empty list protects nothing"},
		{up, []string{"--methods", ",,"}, "--methods \",,\": an empty list protects nothing"},
		{up + "methods: []\n", nil, "--methods \"\": an empty list protects nothing: name the methods to protect (default POST,PATCH) (set at CFG:2)"},
		{up, []string{"--listen", ""}, "--listen is empty"},
		{up, []string{"--listen", "nonsense"}, "--listen \"nonsense\": want host:port"},
		{up, []string{"--listen", "127.0.0.1:99999"}, "--listen \"127.0.0.1:99999\": want host:port with a port from 0 to 65535"},
		{up, []string{"--admin", "127.0.0.1:99999"}, "--admin \"127.0.0.1:99999\": want host:port"},
		{up + "admin: 127.0.0.1:99999\n", nil, "(set at CFG:2)"},
		// A key retention that keeps nothing past the retention.
		{up, []string{"--retention", "2s", "--key-retention", "1s"}, "--key-retention 1s is not longer than --retention 2s"},
		{up + "retention: 1h\nkey-retention: 24h\nroutes:\n  - match: POST /a\n    retention: 48h\n", nil, "cfg.yaml:6: routes[0].retention: 48h0m0s is not shorter than --key-retention 24h0m0s"},
		// Settings given where they have no effect.
		{up, []string{"--reconcile-token", "t"}, "--reconcile-token needs --reconcile-url"},
		{up + "reconcile-timeout: 2s\n", nil, "--reconcile-timeout needs --reconcile-url (or a route's reconcile-url): without one there is no lookup for it to apply to (set at CFG:2)"},
		{up, []string{"--reconcile-rate", "5"}, "--reconcile-rate needs --reconcile-url"},
		{up, []string{"--reconcile-concurrency", "2"}, "--reconcile-concurrency needs --reconcile-url"},
		{up, []string{"--admin", "", "--admin-token", "t0ken-0123456789"}, "--admin-token is given with --admin '' (no admin API)"},
		{up + "admin: ''\nadmin-hosts: [a.example]\n", nil, "--admin-hosts is given with --admin ''"},
		{up, []string{"--admin", "", "--admin-insecure"}, "--admin-insecure is given with --admin ''"},
		{up, []string{"--admin", "", "--admin-tokens-file", "/x"}, "--admin-tokens-file is given with --admin ''"},
		{up, []string{"--admin", "", "--admin-tls-cert", "/x"}, "--admin-tls-cert is given with --admin ''"},
		// --admin-insecure where it allows nothing: the admin API needs a
		// token or a client certificate, or listens on loopback.
		{up, []string{"--admin-insecure"}, "--admin-insecure has no effect: --admin listens on loopback 127.0.0.1:9090, which needs no token"},
		{up, []string{"--admin", "localhost:9090", "--admin-insecure"}, "--admin listens on loopback localhost:9090, which needs no token"},
		{up + "admin-insecure: true\n", nil, "--admin-insecure has no effect: --admin listens on loopback 127.0.0.1:9090, which needs no token; it only allows an --admin address beyond loopback without a token or client certificates: leave --admin-insecure out (set at CFG:2)"},
		{up, []string{"--admin", "0.0.0.0:9090", "--admin-insecure", "--admin-token", "t0ken-0123456789"}, "--admin-insecure has no effect: --admin-token is set"},
		{up + "admin: 0.0.0.0:9090\nadmin-insecure: true\nadmin-tokens-file: /x\n", nil, "--admin-insecure has no effect: --admin-tokens-file is set, so the admin API requires a token"},
		{up, []string{"--admin", "0.0.0.0:9090", "--admin-insecure", "--admin-tls-cert", "/x", "--admin-tls-key", "/x", "--admin-client-ca", "/x"},
			"--admin-insecure has no effect: --admin-client-ca is set, so the admin API requires a client certificate"},
		{up, []string{"--no-migrate"}, "--no-migrate applies to a PostgreSQL store only"},
		{up, []string{"--no-migrate", "--store", "redis://:pw@127.0.0.1:1/0"}, "a redis:// store has none"},
		{up, []string{"--store", ""}, "--store is empty"},
		{up, []string{"--tenant-header", ""}, "--tenant-header is empty"},
		{up, []string{"--admin-tokens-file", ""}, "--admin-tokens-file is empty"},
		{up, []string{"--admin-tokens-file", " "}, "--admin-tokens-file is empty"},
		// Overflow.
		{up, []string{"--max-body", "8589934592GiB"}, "8589934592GiB is more bytes than idem can count"},
	} {
		_, _, err := checkConfig(t, c.text, c.args...)
		if err == nil {
			t.Errorf("%q %q: no error; want %q", c.text, c.args, c.want)
			continue
		}
		got, want := withoutDir(err), strings.ReplaceAll(c.want, "CFG", "cfg.yaml")
		if !strings.Contains(got, want) || !errors.Is(err, errUsage) || strings.Contains(got, ":pw@") {
			t.Errorf("%q %q:\n got %v\nwant %q, a usage error", c.text, c.args, got, want)
		}
	}
}

// IDEM_ADMIN_INSECURE=true is refused where the flag is, naming the
// variable; false, the default, allows nothing and is accepted anywhere,
// and --admin-insecure stays accepted where it allows a network address
// without a token.
func TestAdminInsecureIsRefusedWhereItHasNoEffect(t *testing.T) {
	const up = "upstream: http://127.0.0.1:1\n"
	t.Setenv("IDEM_ADMIN_INSECURE", "true")
	_, _, err := checkConfig(t, up, "--admin-token", "t0ken-0123456789")
	want := "--admin-insecure has no effect: --admin-token is set, so the admin API requires a token"
	if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "set by IDEM_ADMIN_INSECURE") {
		t.Errorf("IDEM_ADMIN_INSECURE=true with --admin-token: %v; want a usage error saying %q, set by IDEM_ADMIN_INSECURE", err, want)
	}
	if _, _, err := checkConfig(t, up, "--admin", "0.0.0.0:9090"); err != nil {
		t.Errorf("IDEM_ADMIN_INSECURE=true with --admin 0.0.0.0:9090 and no token: %v; want it accepted", err)
	}
	t.Setenv("IDEM_ADMIN_INSECURE", "false")
	if _, _, err := checkConfig(t, up, "--admin-token", "t0ken-0123456789"); err != nil {
		t.Errorf("IDEM_ADMIN_INSECURE=false with --admin-token: %v; want it accepted", err)
	}
}

// The values that mean "off" or "none" keep meaning it when given: a wait,
// key retention, background sweep and drain delay of 0; an admin API
// turned off alone; the settings of a lookup with a route's reconcile-url.
func TestZeroThatMeansOffIsAccepted(t *testing.T) {
	const up = "upstream: http://127.0.0.1:1\n"
	for _, c := range []struct {
		text string
		args []string
	}{
		{up + "wait: 0s\nkey-retention: 0s\nreconcile-every: 0s\ndrain-delay: 0s\n", nil},
		{up, []string{"--admin", ""}},
		{up + "reconcile-token: t\nreconcile-timeout: 2s\nroutes:\n  - match: POST /a\n    name: a\n    reconcile-url: http://127.0.0.1:1/{key}\n", nil},
		{up, []string{"--retention", "1h", "--key-retention", "2h"}},
		{up, []string{"--listen", "127.0.0.1:0", "--admin", "localhost:http"}},
		{up, []string{"--max-body", "8GiB"}},
	} {
		if _, _, err := checkConfig(t, c.text, c.args...); err != nil {
			t.Errorf("%q %q: %v; want it accepted", c.text, c.args, err)
		}
	}
}

// withoutDir is err's text with the test's directory taken out of the
// config file's path, which is then cfg.yaml.
func withoutDir(err error) string {
	got := err.Error()
	if i := strings.Index(got, "cfg.yaml"); i >= 0 {
		dir := got[:i]
		dir = dir[strings.LastIndexAny(dir, " (")+1:]
		got = strings.ReplaceAll(got, dir+"cfg.yaml", "cfg.yaml")
	}
	return got
}

// --check-config and GET /v1/config show the tenant's sources that run when
// --tenant-from is not given, not the flag's empty default: the stripe
// format adds Stripe-Account, which decides what a key covers.
func TestEffectiveConfigShowsTheDefaultTenantSources(t *testing.T) {
	for _, c := range []struct{ format, want string }{
		{"problem", "authorization"},
		{"stripe", "authorization,header:Stripe-Account"},
	} {
		s, _, err := checkConfig(t, "upstream: http://127.0.0.1:1\nerror-format: "+c.format+"\n")
		if err != nil {
			t.Fatal(err)
		}
		if got := effective(s).Settings["tenant-from"]; got.Value != c.want || got.Kind != "default" {
			t.Errorf("--error-format %s: tenant-from %+v; want %q, the default", c.format, got, c.want)
		}
	}
	s, _, err := checkConfig(t, "upstream: http://127.0.0.1:1\nerror-format: stripe\ntenant-from: [header:X-Tenant]\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := effective(s).Settings["tenant-from"]; got.Value != "header:X-Tenant" || got.Kind != "file" {
		t.Errorf("tenant-from from the file: %+v; want header:X-Tenant, from the file", got)
	}
}
