package main

import (
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
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
			g := startGateway(t, "--upstream", up.URL, "--store", uri, "--admin-token", "s3cret", "--tenant-header", "X-Tenant-ID")
			call := func(method, path string) (int, string) { return adminCall(t, g, method, path, "s3cret", "") }
			const tenant = "acme"
			key := "inflight-" + rand.Text()[:8]
			first := make(chan answer, 1)
			go func() { first <- postWithin(t, g, key, time.Minute) }()
			<-up.started
			if code, body := call("DELETE", "/v1/keys/"+tenant+"/"+key); code != 409 || !strings.Contains(body, `"key_in_flight"`) {
				t.Errorf("DELETE of a key in flight = %d %s; want 409 key_in_flight", code, body)
			}
			if uri != "memory" {
				out, err := exec.Command(binary, "keys", "--store", uri, "delete", tenant, key).CombinedOutput()
				if err == nil || !strings.Contains(string(out), "in flight") {
					t.Errorf("idem keys delete of a key in flight: %v %s; want an error", err, out)
				}
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
