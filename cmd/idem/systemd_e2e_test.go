package main

import (
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A SIGHUP (systemctl reload) without --config is logged and the gateway
// keeps serving, then stops cleanly on SIGTERM. Go's default for SIGHUP
// ended the process.
func TestSIGHUPKeepsServing(t *testing.T) {
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL)
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	g.waitForLog(t, "nothing to reload", 1)
	if a := post(t, "http://"+g.addr, "after-sighup", "{}"); a.status != 201 || up.count("after-sighup") != 1 {
		t.Fatalf("a request after SIGHUP = %d %s, %d executions; want 201, once", a.status, a.body, up.count("after-sighup"))
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM = %v; want 0\n%s", err, g.logText())
	}
}

// waitForLog waits until the gateway's log holds text n times, failing
// the test if the process exits or 20 s pass first.
func (g *gatewayProc) waitForLog(t *testing.T, text string, n int) {
	t.Helper()
	// The log is another process's: there is nothing to wait on but polling.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for strings.Count(g.logText(), text) < n {
		select {
		case err := <-g.done:
			t.Fatalf("idem serve exited: %v\n%s", err, g.logText())
		case <-deadline:
			t.Fatalf("%q is not %d times in the log:\n%s", text, n, g.logText())
		case <-tick.C:
		}
	}
}

// serveFlagNames returns the names of idem serve's flags, as its help
// lists them.
func serveFlagNames(t *testing.T) []string {
	t.Helper()
	help, err := exec.Command(binary, "help", "serve").CombinedOutput()
	if err != nil {
		t.Fatalf("idem help serve: %v\n%s", err, help)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(string(help), -1) {
		names = append(names, m[1])
	}
	return names
}
