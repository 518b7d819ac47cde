package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// OASIS Repeatable Requests through idem serve --repeatability: the first
// send runs, a retry replays, a send whose first try is older than keys are
// kept is refused with 412 without running, and the same id with another
// body is a mismatch; without the flag the headers mean nothing.
func TestRepeatableRequests(t *testing.T) {
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL, "--retention", "1h", "--repeatability")
	base := "http://" + g.addr
	now := time.Now().UTC().Format(http.TimeFormat)
	send := func(id, firstSent, body string) answer {
		return post(t, base, "", body, "Repeatability-Request-ID", id, "Repeatability-First-Sent", firstSent)
	}
	total := func() int {
		up.mu.Lock()
		defer up.mu.Unlock()
		n := 0
		for _, c := range up.calls {
			n += c
		}
		return n
	}
	check := func(name string, a answer, status int, result string, runs int) {
		t.Helper()
		if a.status != status || a.header.Get("Repeatability-Result") != result || total() != runs {
			t.Errorf("%s: %d, Repeatability-Result %q, %d runs upstream; want %d, %q, %d (body %s)",
				name, a.status, a.header.Get("Repeatability-Result"), total(), status, result, runs, a.body)
		}
	}
	code := func(a answer) string {
		var p struct{ Code string }
		json.Unmarshal([]byte(a.body), &p)
		return p.Code
	}

	first := send("7a1c-0001", now, `{"amount":1}`)
	check("first", first, http.StatusCreated, "accepted", 1)
	retry := send("7a1c-0001", now, `{"amount":1}`)
	check("retry", retry, http.StatusCreated, "accepted", 1)
	if up.count("7a1c-0001") != 1 { // the gateway forwards the key upstream as Idempotency-Key
		t.Errorf("upstream saw key 7a1c-0001 %d times, want 1", up.count("7a1c-0001"))
	}
	if !retry.replayed || retry.body != first.body {
		t.Errorf("retry: replayed %v, body %s; want the first's %s", retry.replayed, retry.body, first.body)
	}
	if got := retry.header.Get("Idempotency-Expiry"); got != "response=3600, key=3600" {
		t.Errorf("Idempotency-Expiry %q", got)
	}

	stale := send("7a1c-0002", time.Now().Add(-2*time.Hour).UTC().Format(http.TimeFormat), `{"amount":2}`)
	check("stale First-Sent", stale, http.StatusPreconditionFailed, "rejected", 1)
	if c := code(stale); c != "first_sent_stale" {
		t.Errorf("stale First-Sent: code %q, want first_sent_stale", c)
	}

	mismatch := send("7a1c-0001", now, `{"amount":3}`)
	check("mismatch", mismatch, http.StatusUnprocessableEntity, "rejected", 1)
	if c := code(mismatch); c != "key_mismatch" {
		t.Errorf("mismatch: code %q, want key_mismatch", c)
	}

	noFirstSent := post(t, base, "", `{"amount":4}`, "Repeatability-Request-ID", "7a1c-0003")
	check("no First-Sent", noFirstSent, http.StatusBadRequest, "", 1)
	both := post(t, base, "other-key", `{"amount":5}`, "Repeatability-Request-ID", "7a1c-0004", "Repeatability-First-Sent", now)
	check("two keys", both, http.StatusBadRequest, "", 1)

	// Off unless enabled: the headers are ignored, the request is unkeyed.
	off := startGateway(t, "--upstream", up.URL, "--retention", "1h")
	for i := range 2 {
		a := post(t, "http://"+off.addr, "", `{"amount":1}`, "Repeatability-Request-ID", "7a1c-0001", "Repeatability-First-Sent", now)
		check("flag off", a, http.StatusCreated, "", 2+i)
	}
}
