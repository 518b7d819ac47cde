package main

import (
	"context"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// A SIGHUP while idem serve waits for its store was dropped with a
// warning: the gateway then started with the file as it was before the
// wait, /v1/config said so, and the metrics said the last reload had
// succeeded. Now the file is read again when the store answers: the
// gateway starts with it when it loads, and otherwise with the last valid
// configuration, the failure counted and logged as a reload's. Each case
// starts with the store down (a redis-server of its own, killed), no
// require-key, changes the file, sends SIGHUP, then brings Redis up.
func TestSIGHUPWhileStarting(t *testing.T) {
	t.Parallel() // mostly waiting for the store's retries; each case has its own Redis and gateway
	for _, c := range []struct {
		name       string
		atHUP      func(store string) string // the file when SIGHUP comes
		hupLogged  string                    // what the reload logs then
		afterHUP   func(store string) string // the file when the store answers ("": as atHUP)
		wantStatus int                       // a POST without a key once serving
		success    string                    // idem_config_reloads_total{result="success"}
		failure    string                    // idem_config_reloads_total{result="failure"}
		successful string                    // idem_config_last_reload_successful
		logged     string                    // the outcome's log line
		requireKey string                    // require-key in GET /v1/config
	}{
		{name: "valid", atHUP: func(store string) string { return "store: " + store + "\nrequire-key: true\n" },
			hupLogged: "reload requested while starting: the file loads", wantStatus: http.StatusBadRequest,
			success: "1", failure: "0", successful: "1", logged: "configuration reloaded; the gateway starts with it", requireKey: "true"},
		// A change to a setting only a restart applies (the store) is
		// refused as a reload of a running gateway refuses it, the rest
		// of the file with it.
		{name: "restart-only", atHUP: func(string) string { return "store: redis://127.0.0.1:1/0\nrequire-key: true\n" },
			hupLogged: "reload requested while starting: the file does not load now", wantStatus: http.StatusCreated,
			success: "0", failure: "1", successful: "0", logged: "store changed, which a reload cannot apply", requireKey: "false"},
		// Valid at SIGHUP, broken (without a SIGHUP) when the store
		// answers: the gateway starts with what the SIGHUP read, the
		// newest valid configuration, and the failure shows.
		{name: "broken-after", atHUP: func(store string) string { return "store: " + store + "\nrequire-key: true\n" },
			hupLogged: "reload requested while starting: the file loads",
			afterHUP: func(store string) string {
				return "store: " + store + "\nrequire-key: false\nroutes:\n  - match: POST /charges\n    require-kee: true\n"
			},
			wantStatus: http.StatusBadRequest, success: "0", failure: "1", successful: "0",
			logged: "routes[0].require-kee: unknown field", requireKey: "true"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv, err := redisproc.Start(context.Background(), redisproc.Config{Dir: t.TempDir()})
			if err != nil {
				testenv.Unavailable(t, "a redis-server of this test's own", err)
			}
			t.Cleanup(srv.Kill)
			srv.Kill()
			store := "redis://" + srv.Addr + "/0"
			path := writeConfig(t, "store: "+store+"\n")
			write := func(text string) {
				if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			up := newUpstream(t, 0)
			g := launchServe(t, nil, "--config", path, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json")
			g.startingAdmin(t)
			g.waitForLog(t, "the store does not answer; retrying", 1)
			write(c.atHUP(store))
			if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			g.waitForLog(t, c.hupLogged, 1)
			if c.afterHUP != nil {
				write(c.afterHUP(store))
			}
			if err := srv.Restart(context.Background()); err != nil {
				t.Fatal(err)
			}
			g.waitServing(t)
			g.waitForLog(t, c.logged, 1)
			a := post(t, "http://"+g.addr, "", "{}")
			if a.status != c.wantStatus || (c.wantStatus == http.StatusBadRequest && !strings.Contains(a.body, "key_required")) {
				t.Errorf("a POST without a key = %d %s; want %d", a.status, a.body, c.wantStatus)
			}
			_, served, body := getConfig(t, g, "")
			if v := served.Settings["require-key"].Value; v != c.requireKey {
				t.Errorf("GET /v1/config: require-key %q; want %q\n%s", v, c.requireKey, body)
			}
			metrics := g.metrics(t)
			for _, want := range []string{`idem_config_reloads_total{result="success"} ` + c.success,
				`idem_config_reloads_total{result="failure"} ` + c.failure, "idem_config_last_reload_successful " + c.successful} {
				if !strings.Contains(metrics, want+"\n") {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			if strings.Contains(g.logText(), "reload ignored") {
				t.Errorf("the reload was ignored:\n%s", g.logText())
			}
			if err := g.stop(t); err != nil {
				t.Fatalf("exit after SIGTERM = %v; want 0\n%s", err, g.logText())
			}
		})
	}
}
