package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// gatedUpstream runs every POST until gate is closed, counting runs by
// key; a key that starts with "drop-" has its connection closed after the
// effect, without an answer (the gateway makes it UNKNOWN).
type gatedUpstream struct {
	*httptest.Server
	gate    chan struct{}
	started chan string
	mu      sync.Mutex
	runs    map[string]int
}

func newGatedUpstream(t *testing.T) *gatedUpstream {
	u := &gatedUpstream{gate: make(chan struct{}), started: make(chan string, 16), runs: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		io.ReadAll(r.Body)
		u.mu.Lock()
		u.runs[key]++
		u.mu.Unlock()
		if strings.HasPrefix(key, "drop-") {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		u.started <- key
		<-u.gate
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged "+key)
	}))
	t.Cleanup(func() {
		u.open()
		u.Close()
	})
	return u
}

func (u *gatedUpstream) open() {
	select {
	case <-u.gate:
	default:
		close(u.gate)
	}
}

func (u *gatedUpstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.runs[key]
}

// postWithin is post with a bound: a request the gateway sends upstream
// again would wait for the gate.
func postWithin(t *testing.T, g *gatewayProc, key string, d time.Duration) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.addr+"/charges", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Tenant-ID", "acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(b), resp.Header}
}

// Issue 22, item 3: an admin DELETE of a key in flight let a retry 0.2 s
// later run it a second time. It is refused (409 key_in_flight), as is
// the DELETE of an UNKNOWN key (409 key_unknown: resolve it), unless the
// operator forces it; idem keys delete does the same.
func TestAdminDeleteRefusesKeysInFlightOrUnknown(t *testing.T) {
	for name, uri := range storeURIs(t) {
		t.Run(name, func(t *testing.T) {
			up := newGatedUpstream(t)
			g := startGateway(t, "--upstream", up.URL, "--store", uri, "--admin-token", "s3cret-admin-token", "--tenant-header", "X-Tenant-ID")
			call := func(method, path string) (int, string) {
				return adminCall(t, g, method, path, "s3cret-admin-token", "")
			}
			const tenant = "acme"
			key := "inflight-" + rand.Text()[:8]
			first := make(chan answer, 1)
			go func() { first <- postWithin(t, g, key, time.Minute) }()
			<-up.started
			if code, body := call("DELETE", "/v1/keys/"+tenant+"/"+key); code != 409 || !strings.Contains(body, `"key_in_flight"`) {
				t.Errorf("DELETE of a key in flight = %d %s; want 409 key_in_flight", code, body)
			}
			out, err := exec.Command(binary, "keys", "--admin", g.admin, "--admin-token", "s3cret-admin-token", "delete", tenant, key).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "in flight") {
				t.Errorf("idem keys delete of a key in flight: %v %s; want an error", err, out)
			}
			if a := postWithin(t, g, key, 5*time.Second); a.status != 409 || up.count(key) != 1 {
				t.Errorf("retry after the DELETE = %d %s, %d runs; want 409 key_in_flight and 1 run", a.status, a.body, up.count(key))
			}
			up.open()
			if a := <-first; a.status != 201 {
				t.Fatalf("first request = %d %s; want 201", a.status, a.body)
			}
			if a := postWithin(t, g, key, 5*time.Second); a.status != 201 || !a.replayed || up.count(key) != 1 {
				t.Fatalf("retry after the first finished = %d replayed=%v, %d runs; want its 201 replayed, 1 run", a.status, a.replayed, up.count(key))
			}

			// UNKNOWN: the request may have taken effect.
			drop := "drop-" + rand.Text()[:8]
			if a := postWithin(t, g, drop, 10*time.Second); a.status != 502 {
				t.Fatalf("dropped request = %d %s; want 502", a.status, a.body)
			}
			if code, body := call("DELETE", "/v1/keys/"+tenant+"/"+drop); code != 409 || !strings.Contains(body, `"key_unknown"`) {
				t.Errorf("DELETE of an UNKNOWN key = %d %s; want 409 key_unknown", code, body)
			}
			if a := postWithin(t, g, drop, 10*time.Second); a.status != 503 || up.count(drop) != 1 {
				t.Errorf("retry of the UNKNOWN key = %d %s, %d runs; want 503 outcome_unknown, 1 run", a.status, a.body, up.count(drop))
			}
			if code, body := call("DELETE", "/v1/keys/"+tenant+"/"+drop+"?force=maybe"); code != 400 {
				t.Errorf("DELETE ?force=maybe = %d %s; want 400", code, body)
			}
			if code, body := call("DELETE", "/v1/keys/"+tenant+"/"+drop+"?force=true"); code != 204 {
				t.Fatalf("forced DELETE of an UNKNOWN key = %d %s; want 204", code, body)
			}
			if code, _ := call("GET", "/v1/keys/"+tenant+"/"+drop); code != 404 {
				t.Fatalf("GET after the forced DELETE = %d; want 404", code)
			}
		})
	}
}

// Issue 31, item 5: the tokenless admin API (the default) answered any
// Host and any Origin: from Host evil.example.com it listed the UNKNOWN
// keys with their fences, and a text/plain POST resolved one not_executed,
// after which the retry ran it again. Those requests are refused (403,
// 415), the key stays UNKNOWN, and the retry does not run it.
func TestAdminRefusesPagesOfOtherSites(t *testing.T) {
	for name, uri := range storeURIs(t) {
		t.Run(name, func(t *testing.T) {
			up := newGatedUpstream(t)
			g := startGateway(t, "--upstream", up.URL, "--store", uri, "--tenant-header", "X-Tenant-ID")
			key := "drop-" + rand.Text()[:8]
			if a := postWithin(t, g, key, 10*time.Second); a.status != 502 {
				t.Fatalf("dropped request = %d %s; want 502", a.status, a.body)
			}
			code, body := adminCall(t, g, "GET", "/v1/keys/acme/"+key, "", "")
			var rec struct{ Fence int64 }
			if code != 200 || json.Unmarshal([]byte(body), &rec) != nil || !strings.Contains(body, `"UNKNOWN"`) {
				t.Fatalf("GET of the dropped key = %d %s; want it UNKNOWN", code, body)
			}
			resolve := fmt.Sprintf(`{"fence":%d,"outcome":"not_executed"}`, rec.Fence)
			rebound := func(r *http.Request) { r.Host = "evil.example.com" }
			page := func(r *http.Request) { r.Header.Set("Origin", "http://evil.example.com") }
			form := func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }
			for _, c := range []struct {
				what, method, path, body string
				edit                     func(*http.Request)
				status                   int
				code                     string
			}{
				{"a rebound name lists the keys", "GET", "/v1/keys?state=unknown", "", rebound, 403, "admin_host_refused"},
				{"a rebound name reads the key", "GET", "/v1/keys/acme/" + key, "", rebound, 403, "admin_host_refused"},
				{"a rebound name resolves", "POST", "/v1/keys/acme/" + key + "/resolve", resolve,
					func(r *http.Request) { rebound(r); r.Header.Set("Content-Type", "application/json") }, 403, "admin_host_refused"},
				{"a page lists the keys", "GET", "/v1/keys?state=unknown", "", page, 403, "admin_origin_refused"},
				{"a page resolves", "POST", "/v1/keys/acme/" + key + "/resolve", resolve, func(r *http.Request) { page(r); form(r) }, 403, "admin_origin_refused"},
				{"a text/plain resolve", "POST", "/v1/keys/acme/" + key + "/resolve", resolve, form, 415, "admin_content_type"},
				{"a DELETE without JSON", "DELETE", "/v1/keys/acme/" + key + "?force=true", "", func(*http.Request) {}, 415, "admin_content_type"},
			} {
				code, body := adminAs(t, g, c.method, c.path, c.body, c.edit)
				if code != c.status || !strings.Contains(body, `"code":"`+c.code+`"`) || strings.Contains(body, `"fence"`) {
					t.Errorf("%s: %d %s; want %d %s", c.what, code, body, c.status, c.code)
				}
			}
			if code, body := adminCall(t, g, "GET", "/v1/keys/acme/"+key, "", ""); code != 200 || !strings.Contains(body, `"UNKNOWN"`) {
				t.Fatalf("after the refused calls the key = %d %s; want it UNKNOWN", code, body)
			}
			if a := postWithin(t, g, key, 10*time.Second); a.status != 503 || up.count(key) != 1 {
				t.Fatalf("the retry = %d %s after %d runs; want 503 outcome_unknown, run once", a.status, a.body, up.count(key))
			}
			// Prometheus and the probes scrape by whatever name they use.
			if code, _ := adminAs(t, g, "GET", "/metrics", "", rebound); code != 200 {
				t.Errorf("/metrics by another name = %d; want 200", code)
			}
		})
	}
}

// Issue 31, item 8: every admin change is audited (a log line, a metric,
// GET /v1/audit) with the token's name; tokens are several, read-only or
// read-write, read from --admin-tokens-file and again on SIGHUP; idem keys
// goes through the admin API, so its changes are audited too.
func TestAdminChangesAuditedWithNamedTokens(t *testing.T) {
	up := newGatedUpstream(t)
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	write := func(text string) {
		if err := os.WriteFile(tokens, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ops read-write ops-s3cret-token-1\nviewer read-only viewer-s3cret-token-1\n")
	g := startGateway(t, "--upstream", up.URL, "--tenant-header", "X-Tenant-ID", "--admin-tokens-file", tokens)
	key := "drop-" + rand.Text()[:8]
	if a := postWithin(t, g, key, 10*time.Second); a.status != 502 {
		t.Fatalf("dropped request = %d %s; want 502", a.status, a.body)
	}
	keys := func(token string, args ...string) (string, error) {
		out, err := exec.Command(binary, append([]string{"keys", "--admin", g.admin, "--admin-token", token}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := keys("viewer-s3cret-token-1", "get", "acme", key)
	var rec struct{ Fence int64 }
	if err != nil || json.Unmarshal([]byte(out), &rec) != nil || rec.Fence == 0 {
		t.Fatalf("idem keys get with the read-only token: %v %s", err, out)
	}
	fence := fmt.Sprint(rec.Fence)
	if out, err := keys("viewer-s3cret-token-1", "resolve", "--fence", fence, "--not-executed", "acme", key); err == nil || !strings.Contains(out, "admin_forbidden") {
		t.Fatalf("idem keys resolve with the read-only token: %v %s; want 403 admin_forbidden", err, out)
	}
	if out, err := keys("ops-s3cret-token-2", "get", "acme", key); err == nil || !strings.Contains(out, "401") {
		t.Fatalf("idem keys with a token not yet in the file: %v %s; want 401", err, out)
	}
	write("ops read-write ops-s3cret-token-2\n")
	g.cmd.Process.Signal(syscall.SIGHUP)
	g.waitForLog(t, "configuration reloaded", 1)
	if out, err := keys("ops-s3cret-token-1", "get", "acme", key); err == nil || !strings.Contains(out, "401") {
		t.Fatalf("idem keys with a token the reload removed: %v %s; want 401", err, out)
	}
	if out, err := keys("ops-s3cret-token-2", "resolve", "--fence", fence, "--status", "201", "--body", "settled", "--reason", "INC-42: charged", "acme", key); err != nil {
		t.Fatalf("idem keys resolve with the reloaded token: %v %s", err, out)
	}
	if a := postWithin(t, g, key, 10*time.Second); a.status != 201 || a.body != "settled" || up.count(key) != 1 {
		t.Fatalf("after the resolution: %d %s, %d runs; want the operator's 201 replayed, 1 run", a.status, a.body, up.count(key))
	}
	g.waitForLog(t, `"msg":"admin change"`, 2)
	var lines []map[string]any
	for _, line := range strings.Split(g.logText(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "admin change" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 2 || lines[0]["actor"] != "viewer" || lines[0]["outcome"] != "forbidden" ||
		lines[1]["actor"] != "ops" || lines[1]["action"] != "resolve" || lines[1]["outcome"] != "completed" || lines[1]["reason"] != "INC-42: charged" ||
		lines[1]["state_before"] != "UNKNOWN" || lines[1]["state_after"] != "COMPLETED" || lines[1]["tenant"] != "acme" || lines[1]["key"] != key ||
		lines[1]["fence"] != float64(rec.Fence) || !strings.HasPrefix(lines[1]["remote"].(string), "127.0.0.1:") {
		t.Fatalf("admin change lines: %v", lines)
	}
	if strings.Contains(g.logText(), "-token-") {
		t.Fatalf("the log holds a token:\n%s", g.logText())
	}
	if n := g.metric(t, `idem_admin_changes_total{action="resolve",outcome="completed"}`); n != 1 {
		t.Errorf("idem_admin_changes_total resolve/completed = %v; want 1", n)
	}
	code, body := adminCall(t, g, "GET", "/v1/audit?tenant=acme&key="+key, "ops-s3cret-token-2", "")
	if code != 200 || strings.Count(body, `"actor"`) != 2 || !strings.Contains(body, `"reason":"INC-42: charged"`) {
		t.Fatalf("GET /v1/audit = %d %s; want the key's two records", code, body)
	}
}

// With an empty --admin the serving line says the admin API is off; it said
// admin=<nil>, Go's word for a missing address.
func TestServingLineSaysAdminOff(t *testing.T) {
	up := newUpstream(t, 0)
	g := launchServe(t, nil, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--admin", "", "--log-format", "json")
	g.waitServing(t)
	if g.admin != "off" {
		t.Errorf("the serving line's admin: %q; want \"off\"\n%s", g.admin, g.logText())
	}
}
