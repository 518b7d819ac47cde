package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// countingAPI is an upstream that counts the requests it got by the
// Idempotency-Key it was sent and answers each with answer.
type countingAPI struct {
	*httptest.Server
	mu   sync.Mutex
	runs map[string]int
}

func newCountingAPI(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *countingAPI {
	a := &countingAPI{runs: map[string]int{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		a.mu.Lock()
		a.runs[r.Header.Get("Idempotency-Key")]++
		a.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *countingAPI) count(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runs[key]
}

// send sends method to url with the key (none when empty), a JSON body
// and the header pairs; the connection's failure is an error, not fatal.
func send(method, url, key, body string, hdr ...string) (answer, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer e2e-client")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(b), resp.Header}, nil
}

// testStores are the stores the route tests run on.
func testStores(t *testing.T) map[string]string {
	testenv.Redis(t)
	testenv.Postgres(t)
	return map[string]string{"memory": "memory", "redis": testenv.RedisURL(), "postgres": testenv.DatabaseURL()}
}

// Issue 31, item 2: a route with statuses (deploy/idem.yaml's refunds),
// under the default error format, panicked after the upstream ran for
// every status it did not list: the client got an empty reply, nothing
// was stored, and the key stayed PROCESSING (its lease renewed) for the
// life of the process, so every retry got 409. Through the built binary
// and a config file, on each store: a 201 is stored and replayed, a 409
// (listed unknown) turns the key UNKNOWN, and each ran once.
func TestStatusesRouteStoresAndReplays(t *testing.T) {
	for name, uri := range testStores(t) {
		t.Run(name, func(t *testing.T) {
			up := newCountingAPI(t, func(w http.ResponseWriter, r *http.Request) {
				status, err := strconv.Atoi(r.URL.Query().Get("status"))
				if err != nil {
					status = http.StatusCreated
				}
				w.WriteHeader(status)
				fmt.Fprintf(w, `{"refund":%q}`, r.Header.Get("Idempotency-Key"))
			})
			cfg := writeConfig(t, "routes:\n"+
				"  - match: POST /v1/charges/{id}/refunds\n"+
				"    name: refunds\n"+
				"    statuses:\n"+
				"      unknown: [409]\n"+
				"    reconcile-url: "+up.URL+"/v1/refunds/by-key/{key}\n")
			g := startGateway(t, "--config", cfg, "--upstream", up.URL, "--store", uri)
			base := "http://" + g.addr + "/v1/charges/ch_1/refunds"
			key := "refund-" + testenv.Prefix(t)
			for i, want := range []struct {
				status   int
				replayed bool
			}{{201, false}, {201, true}} {
				a, err := send("POST", base, key, `{"amount":5}`)
				if err != nil || a.status != want.status || a.replayed != want.replayed {
					t.Fatalf("refund, send %d: %d replayed=%v %s (%v); want %d replayed=%v", i+1, a.status, a.replayed, a.body, err, want.status, want.replayed)
				}
			}
			unknownKey := key + "-409"
			if a, err := send("POST", base+"?status=409", unknownKey, `{"amount":5}`); err != nil || a.status != 409 {
				t.Fatalf("a refund answered 409: %d %s (%v); want the upstream's 409", a.status, a.body, err)
			}
			waitState(t, g, tenantOf("Bearer e2e-client"), unknownKey, "UNKNOWN")
			if up.count(key) != 1 || up.count(unknownKey) != 1 {
				t.Fatalf("runs: %d and %d; want 1 each", up.count(key), up.count(unknownKey))
			}
		})
	}
}

// Issue 31, item 12: five made-up Authorization values, each its own
// tenant, whose requests the upstream answered 401 (8 KB each) filled a
// 256 KiB memory store (each tenant to its share), and the real customer
// then got 503 store_full for the retention. A 401 is an answer given
// before any work: it is not stored, so the customer's request is.
func TestMadeUpTenantsCannotFillTheMemoryStore(t *testing.T) {
	refusal := strings.Repeat("x", 8<<10)
	up := newCountingAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer customer" {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, refusal)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"charge":"ch_1"}`)
	})
	g := startGateway(t, "--upstream", up.URL, "--memory-limit", "256KiB")
	base := "http://" + g.addr + "/v1/charges"
	for tenant := range 5 {
		for i := range 12 { // 96 KiB a tenant: past its quarter of the store
			a, err := send("POST", base, fmt.Sprintf("guess-%d", i), `{}`, "Authorization", fmt.Sprintf("Bearer made-up-%d", tenant))
			if err != nil || a.status != http.StatusUnauthorized {
				t.Fatalf("made-up tenant %d, key %d: %d %.80s (%v); want the upstream's 401", tenant, i, a.status, a.body, err)
			}
		}
	}
	for i, replayed := range []bool{false, true} {
		a, err := send("POST", base, "order-1", `{}`, "Authorization", "Bearer customer")
		if err != nil || a.status != http.StatusCreated || a.replayed != replayed {
			t.Fatalf("the customer's request, send %d: %d replayed=%v %s (%v); want 201, replayed=%v", i+1, a.status, a.replayed, a.body, err, replayed)
		}
	}
	if used := g.metric(t, "idem_memory_store_bytes"); used <= 0 || used >= 8<<10 {
		t.Errorf("the memory store holds %v bytes; want only the customer's result (the 401s released)", used)
	}
}

// Issue 31, items 3 and 13, through the built binary: with POST
// /v1/orders keyed by json:/request_id in a config file, the same order
// sent under every spelling of its path runs once (a format suffix of any
// characters, /v1/orders.x-y, among them); "post" and an HTTP/2
// preface (PRI * HTTP/2.0) get 400 and never reach the upstream; a 1.1 MB
// header block from a client still sending gets its 431 and the end of
// the answer, not a reset.
func TestSpellingsRunOnce(t *testing.T) {
	var mu sync.Mutex
	var methods []string
	up := newCountingAPI(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		methods = append(methods, r.Method)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"order":"o_1"}`)
	})
	cfg := writeConfig(t, "routes:\n  - match: POST /v1/orders\n    key-from: json:/request_id\n    require-key: true\n")
	g := startGateway(t, "--config", cfg, "--upstream", up.URL)
	base := "http://" + g.addr
	key := "order-" + testenv.Prefix(t)
	order := `{"request_id":"` + key + `","amount":1}`
	if a, err := send("POST", base+"/v1/orders", "", order); err != nil || a.status != http.StatusCreated {
		t.Fatalf("the order: %d %s (%v)", a.status, a.body, err)
	}
	for _, path := range []string{"/v1/orders/", "/V1/orders", "/v1/Orders", "/v1/orders;v=1", "/v1/orders%20", "/v1/orders.", "/v1//orders",
		"/v1/orders.json", "/v1/orders.x-y", "/v1/orders.v1_0", "/v1/orders.x~1", "/v1/orders.json.json"} {
		a, err := send("POST", base+path, "", order)
		if err != nil || !(a.status == http.StatusCreated && a.replayed) && !(a.status == http.StatusUnprocessableEntity && strings.Contains(a.body, `"key_mismatch"`)) {
			t.Errorf("the order sent to %s: %d %s (%v); want its replay or 422 key_mismatch", path, a.status, a.body, err)
		}
	}
	if a, err := send("post", base+"/v1/orders", "", order); err != nil || a.status != http.StatusBadRequest || !strings.Contains(a.body, `"ambiguous_request"`) {
		t.Errorf(`"post": %d %s (%v); want 400 ambiguous_request`, a.status, a.body, err)
	}
	if n := up.count(key); n != 1 {
		t.Fatalf("the order ran %d times; want once", n)
	}

	conn, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second)) // a bound: the answer comes at once
	io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	if status, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.HasPrefix(status, "HTTP/1.1 400 ") {
		t.Errorf("an HTTP/2 preface: %q, %v; want 400", status, err)
	}

	big, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	big.SetDeadline(time.Now().Add(30 * time.Second))
	head := "POST /v1/orders HTTP/1.1\r\nHost: api.test\r\nX-Big: " + strings.Repeat("a", 1100<<10) + "\r\n\r\n"
	cut := http.DefaultMaxHeaderBytes + 64<<10
	io.WriteString(big, head[:cut])
	if answer, err := io.ReadAll(big); err != nil || !strings.HasPrefix(string(answer), "HTTP/1.1 431 ") {
		t.Errorf("a 1.1 MB header block: %.60q, %v; want a 431 and the end of the answer, not a reset", answer, err)
	}
	if _, err := io.WriteString(big, head[cut:]); err != nil {
		t.Errorf("the rest of the block after the 431: %v; want it drained", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(methods) != 1 {
		t.Errorf("the upstream got %q; want the first order's POST only", methods)
	}
}

// An audit drove the binary with curl: on a protected, require-key
// "GET /v1/exports/run", a keyed HEAD sent twice ran the export twice and
// a keyless one was forwarded; with --methods GET,POST and no routes, a
// keyed HEAD /x ran twice. A HEAD runs the GET endpoint (ServeMux, Rails,
// Express, Spring, Django), so it is protected wherever GET is, under its
// own fingerprint: a HEAD with a GET's key is a mismatch, not a run. And
// "GET /v1/report" with methods [HEAD], which left its GETs unprotected,
// is refused at start and at reload.
func TestHeadIsProtectedWhereGetIs(t *testing.T) {
	up := newCountingAPI(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"export":"done"}`) })
	route := "upstream: " + up.URL + "\nstore: memory\nroutes:\n  - match: GET /v1/exports/run\n    methods: [GET]\n    require-key: true\n"
	path := writeConfig(t, route)
	routed := startGateway(t, "--config", path)
	top := startGateway(t, "--upstream", up.URL, "--store", "memory", "--methods", "GET,POST")
	for _, c := range []struct {
		name, url     string
		keyless, runs int // a keyless HEAD's status and upstream runs
	}{{"route", "http://" + routed.addr + "/v1/exports/run", http.StatusBadRequest, 0}, {"top level", "http://" + top.addr + "/x", http.StatusOK, 1}} {
		key := c.name + "-" + testenv.Prefix(t)
		for i, s := range []struct {
			method, key string
			status      int
			replayed    bool
		}{{"GET", key + "-get", 200, false}, {"HEAD", key + "-head", 200, false}, {"HEAD", key + "-head", 200, true},
			{"HEAD", key + "-get", http.StatusUnprocessableEntity, false}, {"HEAD", "", c.keyless, false}} {
			a, err := send(s.method, c.url, s.key, "")
			if err != nil || a.status != s.status || a.replayed != s.replayed {
				t.Errorf("%s, send %d (%s key %q): %d replayed=%v (%v); want %d replayed=%v", c.name, i+1, s.method, s.key, a.status, a.replayed, err, s.status, s.replayed)
			}
		}
		if up.count(key+"-get") != 1 || up.count(key+"-head") != 1 || up.count("") != c.runs {
			t.Errorf("%s: runs GET key %d, HEAD key %d, keyless %d; want 1, 1 and %d", c.name, up.count(key+"-get"), up.count(key+"-head"), up.count(""), c.runs)
		}
	}

	headOnly := strings.Replace(route, "methods: [GET]", "methods: [HEAD]", 1)
	refused := launchServe(t, nil, "--config", writeConfig(t, headOnly), "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json")
	select {
	case err := <-refused.done:
		ee, ok := err.(*exec.ExitError)
		if out := refused.logText(); !ok || ee.ExitCode() != 2 || !strings.Contains(out, "idem.yaml:5: routes[0].methods") || !strings.Contains(out, "add GET") {
			t.Errorf("idem serve with GET /v1/exports/run, methods [HEAD]: %v\n%s\nwant exit 2, naming idem.yaml:5 routes[0].methods and saying to add GET", err, out)
		}
	case <-refused.ready:
		t.Errorf("idem serve with GET /v1/exports/run, methods [HEAD] started serving; want it refused")
	case <-time.After(20 * time.Second):
		t.Errorf("idem serve with GET /v1/exports/run, methods [HEAD] neither served nor exited in 20s; want it refused")
	}
	if err := os.WriteFile(path, []byte(headOnly), 0o600); err != nil {
		t.Fatal(err)
	}
	routed.cmd.Process.Signal(syscall.SIGHUP)
	routed.waitForLog(t, "reload failed", 1)
	if logs := routed.logText(); !strings.Contains(logs, "routes[0].methods") || !strings.Contains(logs, "add GET") {
		t.Errorf("the failed reload's log does not name routes[0].methods nor say to add GET:\n%s", logs)
	}
	if a, err := send("GET", "http://"+routed.addr+"/v1/exports/run", "", ""); err != nil || a.status != http.StatusBadRequest {
		t.Errorf("after the refused reload, a keyless GET = %d (%v); want 400 (the running route)", a.status, err)
	}
}
