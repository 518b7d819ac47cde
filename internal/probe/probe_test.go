package probe_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/probe"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// defects switches on the bugs that the probe must find.
type defects struct {
	naiveLock     bool // check, run, then store: concurrent requests all run
	noFingerprint bool // a used key replays whatever the payload
	noTenant      bool // keys are shared by all clients
}

type entry struct {
	done   bool
	body   string
	status int
	fp     string
}

// server is an idempotent "create payment" endpoint. Without defects it
// behaves as the IETF draft and Stripe ask: keys scoped by Authorization,
// 409 with Retry-After while a request runs, 422 for another payload, 400
// for a missing or over-long key, replays marked Idempotent-Replayed.
type server struct {
	defects
	mu        sync.Mutex
	entries   map[string]*entry
	runs      int
	running   int
	conflicts int
	changed   *sync.Cond // signalled when a run starts or ends, or a request gets 409
}

func newServer(t *testing.T, d defects) (*httptest.Server, *server) {
	s := &server{defects: d, entries: map[string]*entry{}}
	s.changed = sync.NewCond(&s.mu)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv, s
}

// waitIdle waits until no run is in flight.
func (s *server) waitIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.running > 0 {
		s.changed.Wait()
	}
}

func problem(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"about:blank","status":%d,"code":%q}`, status, code)
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	switch {
	case key == "":
		problem(w, http.StatusBadRequest, "key_missing")
		return
	case len(key) > 255:
		problem(w, http.StatusBadRequest, "key_too_long")
		return
	}
	body, _ := io.ReadAll(r.Body)
	scope := r.Header.Get("Authorization") + "\x00" + key
	if s.noTenant {
		scope = key
	}
	s.mu.Lock()
	e, ok := s.entries[scope]
	switch {
	case ok && !e.done:
		s.conflicts++
		s.changed.Broadcast()
		s.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		problem(w, http.StatusConflict, "in_flight")
		return
	case ok && e.fp != string(body) && !s.noFingerprint:
		s.mu.Unlock()
		problem(w, http.StatusUnprocessableEntity, "payload_mismatch")
		return
	case ok:
		s.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(e.status)
		io.WriteString(w, e.body)
		return
	}
	if !s.naiveLock {
		e = &entry{fp: string(body)}
		s.entries[scope] = e
	}
	s.runs++
	run := s.runs
	s.running++
	s.changed.Broadcast()
	if s.naiveLock {
		// The naive server checked for the key above and stores it only
		// after the work: the work waits for a second run to start, which
		// makes the race it has deterministic.
		s.waitFor(func() bool { return s.running >= 2 })
		e = &entry{fp: string(body)}
		s.entries[scope] = e
	} else {
		// The work lasts until a concurrent request got 409, so that a
		// burst sees the in-flight state.
		conflicts := s.conflicts
		s.waitFor(func() bool { return s.conflicts > conflicts })
	}
	s.running--
	e.done, e.status, e.body = true, http.StatusCreated, fmt.Sprintf(`{"id":"pay_%d"}`, run)
	s.changed.Broadcast()
	s.mu.Unlock()
	w.WriteHeader(e.status)
	io.WriteString(w, e.body)
}

// waitFor waits, with s.mu held, until done() or 200ms have passed.
func (s *server) waitFor(done func() bool) {
	expired := false
	timer := time.AfterFunc(200*time.Millisecond, func() {
		s.mu.Lock()
		expired = true
		s.changed.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	for !done() && !expired {
		s.changed.Wait()
	}
}

// config is the probe's configuration for a test server. Instead of
// Retry-After's second, a retry after a 409 waits until s has no run in
// flight (the 409 itself ends the run): the retry then meets the stored
// answer, however slowly the machine schedules the run's end. s is nil for
// servers that never answer 409.
func config(url string, s *server) probe.Config {
	return probe.Config{
		URL:         url,
		Body:        []byte(`{"amount":100,"currency":"eur"}`),
		Header:      http.Header{"Content-Type": {"application/json"}},
		Credentials: [2]string{"Bearer tenant-a", "Bearer tenant-b"},
		Sleep: func(ctx context.Context, d time.Duration) error {
			if s != nil {
				s.waitIdle()
			}
			return ctx.Err()
		},
	}
}

func TestRunFindsEachDefect(t *testing.T) {
	checks := []string{probe.CheckSample, probe.CheckSequential, probe.CheckBurst, probe.CheckMismatch,
		probe.CheckMissingKey, probe.CheckLongKey, probe.CheckDisconnect, probe.CheckTenant}
	for _, tc := range []struct {
		name    string
		defects defects
		fail    []string
	}{
		{"correct", defects{}, nil},
		{"naive lock", defects{naiveLock: true}, []string{probe.CheckBurst}},
		{"no fingerprint", defects{noFingerprint: true}, []string{probe.CheckMismatch}},
		{"no tenant scope", defects{noTenant: true}, []string{probe.CheckTenant}},
		{"all three", defects{true, true, true}, []string{probe.CheckBurst, probe.CheckMismatch, probe.CheckTenant}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, s := newServer(t, tc.defects)
			rep, err := probe.Run(context.Background(), config(srv.URL, s))
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			rep.WriteText(&text)
			for _, c := range checks {
				f, ok := rep.Finding(c)
				want := probe.Pass
				for _, fc := range tc.fail {
					if fc == c {
						want = probe.Fail
					}
				}
				if !ok || f.Verdict != want {
					t.Errorf("check %s: %v; want %v\n%s", c, f.Verdict, want, text.String())
				}
			}
			if rep.Failed() != (len(tc.fail) > 0) {
				t.Errorf("Failed() = %v with failures %v", rep.Failed(), tc.fail)
			}
		})
	}
}

func TestRunRefusesRemoteTargets(t *testing.T) {
	for _, u := range []string{"http://example.com/pay", "http://10.0.0.1/pay", "https://127.0.0.1.nip.io/pay", "http://[2001:db8::1]/"} {
		_, err := probe.Run(context.Background(), probe.Config{URL: u})
		if !errors.Is(err, probe.ErrRemoteTarget) {
			t.Errorf("Run(%s) error %v; want ErrRemoteTarget", u, err)
		}
	}
	for _, u := range []string{"ftp://127.0.0.1/", "::not a url", ""} {
		_, err := probe.Run(context.Background(), probe.Config{URL: u})
		if !errors.Is(err, probe.ErrInvalidConfig) {
			t.Errorf("Run(%q) error %v; want ErrInvalidConfig", u, err)
		}
	}
	if _, err := probe.Run(context.Background(), probe.Config{URL: "http://127.0.0.1:1/", Burst: -1}); !errors.Is(err, probe.ErrInvalidConfig) {
		t.Errorf("Burst -1: error %v; want ErrInvalidConfig", err)
	}
}

// TestRunStopsAtFailingSample checks that a sample request the server
// refuses stops the probe instead of reporting every check as a defect.
func TestRunStopsAtFailingSample(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}))
	defer srv.Close()
	rep, err := probe.Run(context.Background(), config(srv.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := rep.Finding(probe.CheckSample); f.Verdict != probe.Fail {
		t.Errorf("sample: %v; want FAIL", f.Verdict)
	}
	if f, _ := rep.Finding(probe.CheckBurst); f.Verdict != probe.Skipped {
		t.Errorf("burst: %v; want SKIP", f.Verdict)
	}
	if rep.Requests != 1 {
		t.Errorf("sent %d requests; want 1", rep.Requests)
	}
}

// TestRunReportsUnkeyedServer runs the probe against a server that ignores
// the key entirely: every request runs.
func TestRunReportsUnkeyedServer(t *testing.T) {
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		id := n
		mu.Unlock()
		fmt.Fprintf(w, `{"id":"pay_%d"}`, id)
	}))
	defer srv.Close()
	rep, err := probe.Run(context.Background(), config(srv.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	for c, want := range map[string]probe.Verdict{
		probe.CheckSequential: probe.Fail, probe.CheckBurst: probe.Fail, probe.CheckMismatch: probe.Fail,
		probe.CheckMissingKey: probe.Note, probe.CheckLongKey: probe.Fail, probe.CheckDisconnect: probe.Fail,
	} {
		if f, _ := rep.Finding(c); f.Verdict != want {
			t.Errorf("%s: %v (%s); want %v", c, f.Verdict, f.Observed, want)
		}
	}
}
