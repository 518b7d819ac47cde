package main

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// A SIGHUP (systemctl reload) is logged and the gateway keeps serving,
// then stops cleanly on SIGTERM. Go's default for SIGHUP ended the
// process.
func TestSIGHUPKeepsServing(t *testing.T) {
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL)
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The log is another process's: there is nothing to wait on but polling.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for !strings.Contains(g.logText(), "reload requested") {
		select {
		case err := <-g.done:
			t.Fatalf("idem serve exited on SIGHUP: %v\n%s", err, g.logText())
		case <-deadline:
			t.Fatalf("no \"reload requested\" in the log after SIGHUP:\n%s", g.logText())
		case <-tick.C:
		}
	}
	if a := post(t, "http://"+g.addr, "after-sighup", "{}"); a.status != 201 || up.count("after-sighup") != 1 {
		t.Fatalf("a request after SIGHUP = %d %s, %d executions; want 201, once", a.status, a.body, up.count("after-sighup"))
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM = %v; want 0\n%s", err, g.logText())
	}
}
