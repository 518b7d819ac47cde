package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/lab"
	"github.com/idemkit/idem/internal/redisproc"
	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// idem serve --key-retention on a Redis whose clock is moved (an LD_PRELOAD
// shim: Redis keeps the time of records and tombstones, not the gateway):
// a key is replayed within --retention, answered 410 key_expired after it
// and within --key-retention (a different payload: still the mismatch),
// and runs again only after both.
func TestKeyRetentionOnRedisServerClock(t *testing.T) {
	ctx := context.Background()
	shim, err := lab.ClockShim(ctx)
	if err != nil {
		testenv.Unavailable(t, "the clock shim (a C compiler)", err)
	}
	offset := filepath.Join(t.TempDir(), "clock-offset")
	if err := lab.MoveClock(offset, 0); err != nil {
		t.Fatal(err)
	}
	srv, err := redisproc.Start(ctx, redisproc.Config{Dir: t.TempDir(), Env: []string{"LD_PRELOAD=" + shim, "LAB_CLOCK_OFFSET_FILE=" + offset}})
	if err != nil {
		testenv.Unavailable(t, "a private redis-server", err)
	}
	defer srv.Kill()
	up := newUpstream(t, 0)
	g := startGateway(t, "--upstream", up.URL, "--store", "redis://"+srv.Addr+"/0", "--retention", "1h", "--key-retention", "720h")
	base := "http://" + g.addr
	const key = "late-retry-1"
	move := func(by time.Duration) {
		t.Helper()
		if err := lab.MoveClock(offset, by); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, a answer, status, runs int) {
		t.Helper()
		if a.status != status || up.count(key) != runs {
			t.Fatalf("%s: %d, %d runs upstream; want %d, %d (body %s)", what, a.status, up.count(key), status, runs, a.body)
		}
	}

	expect("first", post(t, base, key, `{"amount":1}`), http.StatusCreated, 1)
	move(59 * time.Minute)
	replay := post(t, base, key, `{"amount":1}`)
	expect("within retention", replay, http.StatusCreated, 1)
	if !replay.replayed {
		t.Error("within retention: not a replay")
	}

	move(61 * time.Minute)
	gone := post(t, base, key, `{"amount":1}`)
	expect("after retention", gone, http.StatusGone, 1)
	var p struct {
		Code           string `json:"code"`
		CompletedAt    string `json:"completed_at"`
		OriginalStatus int    `json:"original_status"`
	}
	json.Unmarshal([]byte(gone.body), &p)
	if at, err := time.Parse(time.RFC3339, p.CompletedAt); p.Code != "key_expired" || p.OriginalStatus != 201 || err != nil ||
		at.Before(time.Now().Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
		t.Errorf("after retention: %s; want key_expired, completed_at about now (by the unmoved clock it completed at), original_status 201", gone.body)
	}
	expect("another payload after retention", post(t, base, key, `{"amount":2}`), http.StatusUnprocessableEntity, 1)

	move(721 * time.Hour)
	expect("after key retention", post(t, base, key, `{"amount":1}`), http.StatusCreated, 2)
}

// An UNKNOWN key outlives the response (and the key: it is kept until settled):
// with --retention 1s --key-retention 1h, a request whose upstream
// connection dropped after the effect (502, UNKNOWN) is retried well past
// the retention and is still not run again, on every store (issue 31,
// item 4: the retry at 3.5 s of --retention 2s ran it again).
func TestUnknownOutlivesTheRetention(t *testing.T) {
	t.Parallel() // mostly waiting; its gateway, upstream and keys are its own
	for name, uri := range storeURIs(t) {
		t.Run(name, func(t *testing.T) {
			l := newLedger(t, "")
			key := "unknown-" + testenv.Prefix(t)
			l.drop[key] = true
			g := startGateway(t, "--upstream", l.URL, "--store", uri, "--retention", "1s", "--key-retention", "1h")
			base := "http://" + g.addr
			first := post(t, base, key, `{"amount":3}`)
			marked := time.Now() // the key turned UNKNOWN before this answer
			if first.status != http.StatusBadGateway || first.header.Get("Idempotency-Expiry") != "response=1, key=3600" {
				t.Fatalf("first: %d %s, Idempotency-Expiry %q; want 502 and response=1, key=3600", first.status, first.body, first.header.Get("Idempotency-Expiry"))
			}
			// The retention runs out: time is all this waits for (a later
			// retry only makes the test stricter).
			time.Sleep(time.Until(marked.Add(2 * time.Second)))
			retry := post(t, base, key, `{"amount":3}`)
			if retry.status != http.StatusServiceUnavailable || !strings.Contains(retry.body, "outcome_unknown") || l.executions(key) != 1 {
				t.Fatalf("retry %v after the UNKNOWN answer, past --retention 1s, within --key-retention 1h: %d %s, %d executions; want 503 outcome_unknown, 1 execution",
					time.Since(marked).Round(time.Millisecond), retry.status, retry.body, l.executions(key))
			}
		})
	}
}
