package gateway

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// movedClock is the memory store's clock, moved by the test, not slept.
type movedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *movedClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *movedClock) move(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A key is replayed within --retention, answered 410 key_expired (with its
// completion time and original status, in both error formats) after it
// and within --key-retention, a mismatch there is still a mismatch, and the
// request runs again only after both. The store's clock is moved.
func TestKeyRetentionTombstone(t *testing.T) {
	for _, format := range []idemhttp.ErrorFormat{idemhttp.ErrorFormatProblem, idemhttp.ErrorFormatStripe} {
		t.Run(format.String(), func(t *testing.T) {
			var runs atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"id":"ch_1"}`)
			}))
			defer up.Close()
			start := time.Now().Truncate(time.Second)
			clock := &movedClock{now: start}
			store, err := memstore.New(&memstore.Options{Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(up.URL)
			g, err := New(Config{Upstream: u, Store: store, Retention: time.Hour, KeyRetention: 30 * 24 * time.Hour,
				ErrorFormat: format, Repeatability: true, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(g.Handler())
			defer srv.Close()
			send := func(body string, hdr ...string) (*http.Response, []byte) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(body))
				req.Header.Set("Idempotency-Key", "late-retry")
				for i := 0; i+1 < len(hdr); i += 2 {
					req.Header.Set(hdr[i], hdr[i+1])
				}
				req.Header.Set("Authorization", "Bearer client")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp, b
			}
			expect := func(what string, resp *http.Response, status int, wantRuns int64) {
				t.Helper()
				if resp.StatusCode != status || runs.Load() != wantRuns {
					t.Fatalf("%s: %d with %d runs upstream; want %d with %d", what, resp.StatusCode, runs.Load(), status, wantRuns)
				}
				if got := resp.Header.Get(idemhttp.HeaderExpiry); got != "response=3600, key=2592000" {
					t.Errorf("%s: %s %q", what, idemhttp.HeaderExpiry, got)
				}
			}

			resp, _ := send(`{"amount":1}`)
			expect("first", resp, http.StatusCreated, 1)
			clock.move(59 * time.Minute)
			resp, _ = send(`{"amount":1}`)
			expect("within retention", resp, http.StatusCreated, 1)
			if resp.Header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Error("within retention: not a replay")
			}

			clock.move(2 * time.Minute) // past the retention, within the key retention
			resp, body := send(`{"amount":1}`)
			expect("after retention", resp, http.StatusGone, 1)
			var got struct {
				Code           string `json:"code"`
				OriginalStatus int    `json:"original_status"`
				Error          struct {
					Code           string `json:"code"`
					CompletedAt    string `json:"completed_at"`
					OriginalStatus int    `json:"original_status"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			var ca struct {
				CompletedAt string `json:"completed_at"`
			}
			json.Unmarshal(body, &ca)
			code, completedAt, status := got.Code, ca.CompletedAt, got.OriginalStatus
			if format == idemhttp.ErrorFormatStripe {
				code, completedAt, status = got.Error.Code, got.Error.CompletedAt, got.Error.OriginalStatus
			}
			if want := start.UTC().Format(time.RFC3339); code != "key_expired" || completedAt != want || status != http.StatusCreated {
				t.Errorf("after retention: code %q, completed_at %q, original_status %d; want key_expired, %s, 201 (body %s)",
					code, completedAt, status, want, body)
			}
			resp, _ = send(`{"amount":2}`)
			expect("another payload after retention", resp, format.MismatchStatus(), 1)
			// The same key sent as a Repeatable Request: refused as a repeat.
			resp, _ = send(`{"amount":1}`, idemhttp.HeaderRepeatabilityID, "late-retry",
				idemhttp.HeaderRepeatabilityFirstSent, time.Now().UTC().Format(http.TimeFormat))
			expect("a Repeatable Request after retention", resp, http.StatusGone, 1)
			if got := resp.Header.Get(idemhttp.HeaderRepeatabilityResult); got != "rejected" {
				t.Errorf("a Repeatable Request after retention: Repeatability-Result %q, want rejected", got)
			}

			clock.move(30 * 24 * time.Hour) // past both
			resp, _ = send(`{"amount":1}`)
			expect("after key retention", resp, http.StatusCreated, 2)
		})
	}
}
