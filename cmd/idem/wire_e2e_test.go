package main

import (
	"crypto/sha256"
	bigendian "encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestQuotedKeysRunOnceThroughReconciliation: a key sent as an RFC 9651
// string (`"q-1"`, as the IETF draft writes it, escapes included) reaches
// the upstream and the reconcile lookup in one form, so the lookup finds
// the request the dropped connection hid: 1 execution for 3 tries.
func TestQuotedKeysRunOnceThroughReconciliation(t *testing.T) {
	l := newLedger(t, "tok")
	g := startGateway(t, "--upstream", l.URL, "--reconcile-url", l.URL+"/lookup/{key}", "--reconcile-token", "tok")
	for _, c := range []struct{ sent, key string }{
		{`"q-1"`, "q-1"},
		{`"q-\"2\"-\\"`, `q-"2"-\`},
		{`"q 3"`, "q 3"},
	} {
		l.mu.Lock()
		l.drop[c.key], l.drop[c.sent] = true, true // whichever form reaches the ledger: its first execution is dropped
		l.mu.Unlock()
		var got []answer
		for range 3 {
			got = append(got, post(t, "http://"+g.addr, c.sent, `{"amount":1}`))
		}
		if n := l.executions(c.key) + l.executions(c.sent); n != 1 {
			t.Errorf("key %s: %d executions for 3 tries (%d under %q, %d under %q); want 1",
				c.sent, n, l.executions(c.key), c.key, l.executions(c.sent), c.sent)
		}
		if got[0].status != 502 || !strings.Contains(got[0].body, "upstream_no_response") {
			t.Errorf("key %s: first answer %d %s; want 502 upstream_no_response", c.sent, got[0].status, got[0].body)
		}
		for _, a := range got[1:] {
			if a.status != 201 || !a.replayed || a.body != l.result(c.key) {
				t.Errorf("key %s: retry %d %q replayed=%v; want the upstream's real %q replayed", c.sent, a.status, a.body, a.replayed, l.result(c.key))
			}
		}
	}
	// The admin API and the logs name the key as the store has it.
	if code, body := adminCall(t, g, "GET", "/v1/keys/"+tenantOf("Bearer e2e-client")+"/q-%222%22-%5C", "", ""); code != 200 ||
		!strings.Contains(body, `"key":"q-\"2\"-\\"`) {
		t.Errorf("admin GET of the decoded key = %d %s", code, body)
	}
	if logs := g.logText(); !strings.Contains(logs, `"key":"q-1"`) || strings.Contains(logs, `"key":"\"q-1\""`) {
		t.Errorf("the log does not name the key q-1 in its stored form:\n%s", logs)
	}
}

// TestConnectionNamingTheKeyIsRefused: a Connection header naming the
// key, the tenant's source or a fence header would make the gateway strip
// it before forwarding (hop-by-hop) while it deduplicates on it; the
// upstream would never see the key, its lookup would answer 404 and the
// request would run again. Such a request gets 400 hop_by_hop_header and
// is not sent.
func TestConnectionNamingTheKeyIsRefused(t *testing.T) {
	l := newLedger(t, "")
	g := startGateway(t, "--upstream", l.URL, "--reconcile-url", l.URL+"/lookup/{key}", "--tenant-from", "authorization,header:X-Tenant-ID")
	for _, conn := range []string{"Idempotency-Key", "Authorization", "x-tenant-id", "close, Idempotency-Fence"} {
		for range 3 {
			a := post(t, "http://"+g.addr, "conn-1", `{}`, "Connection", conn, "X-Tenant-ID", "acme")
			if a.status != 400 || !strings.Contains(a.body, `"code":"hop_by_hop_header"`) {
				t.Errorf("Connection: %s: %d %s; want 400 hop_by_hop_header", conn, a.status, a.body)
			}
		}
	}
	if n := l.executions("conn-1") + l.executions(""); n != 0 {
		t.Fatalf("%d refused requests reached the upstream", n)
	}
	if a := post(t, "http://"+g.addr, "conn-1", `{}`, "Connection", "X-Other", "X-Tenant-ID", "acme"); a.status != 201 {
		t.Fatalf("Connection: X-Other: %d %s; want 201", a.status, a.body)
	}
}

// tenantOf is the gateway's tenant for one Authorization value under
// --tenant-from authorization, computed the way docs/reconcile.md says.
func tenantOf(authorization string) string {
	b := bigendian.BigEndian.AppendUint64(nil, uint64(len(authorization)))
	sum := sha256.Sum256(append(b, authorization...))
	return hex.EncodeToString(sum[:])
}

// scopedLedger is an upstream that records each execution under the
// tenant the gateway forwarded (Idempotency-Tenant) and the key, with the
// fence it carried. It drops the connection, after the effect, of every
// execution sent with an Authorization in drop. It has two lookups: GET
// /by-key/{key} finds the key's first execution in any tenant (an upstream
// that knows keys only), GET /by-tenant/{tenant}/{key} the tenant's own.
type scopedLedger struct {
	*httptest.Server
	mu    sync.Mutex
	execs map[string]int         // by tenant and key
	first map[string]ledgerEntry // by key: its first execution
	own   map[string]ledgerEntry // by tenant and key
	drop  map[string]bool        // Authorization values whose executions are dropped
}

type ledgerEntry struct{ body, fence, tenant string }

func newScopedLedger(t *testing.T) *scopedLedger {
	l := &scopedLedger{execs: map[string]int{}, first: map[string]ledgerEntry{}, own: map[string]ledgerEntry{}, drop: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		key, tenant := r.Header.Get("Idempotency-Key"), r.Header.Get("Idempotency-Tenant")
		l.mu.Lock()
		l.execs[tenant+" "+key]++
		e := ledgerEntry{body: fmt.Sprintf(`{"charge":%q,"for":%q}`, key, r.Header.Get("Authorization")), fence: r.Header.Get("Idempotency-Fence"), tenant: tenant}
		l.own[tenant+" "+key] = e
		if _, ok := l.first[key]; !ok {
			l.first[key] = e
		}
		drop := l.drop[r.Header.Get("Authorization")]
		l.mu.Unlock()
		if drop {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, e.body)
	})
	answer := func(w http.ResponseWriter, key string, e ledgerEntry, ok bool) {
		w.Header().Set("Idempotency-Key", key)
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Idempotency-Original-Status", "201")
		w.Header().Set("Idempotency-Fence", e.fence)
		w.Header().Set("Idempotency-Tenant", e.tenant)
		io.WriteString(w, e.body)
	}
	mux.HandleFunc("GET /by-key/{key}", func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		e, ok := l.first[r.PathValue("key")]
		l.mu.Unlock()
		answer(w, r.PathValue("key"), e, ok)
	})
	mux.HandleFunc("GET /by-tenant/{tenant}/{key}", func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		e, ok := l.own[r.PathValue("tenant")+" "+r.PathValue("key")]
		l.mu.Unlock()
		answer(w, r.PathValue("key"), e, ok)
	})
	l.Server = httptest.NewServer(mux)
	t.Cleanup(l.Close)
	return l
}

// TestLookupNeverAnswersForAnotherTenant: Alice and Bob use the same
// key; Bob's request runs and its answer is lost. A lookup that knows
// keys only finds Alice's request, whose fence is not Bob's attempt's: Bob's
// key stays UNKNOWN, never Alice's response replayed to him. A lookup
// scoped by the tenant the upstream got with the request (Idempotency-Tenant,
// the admin API's {tenant}) finds Bob's own request and replays it.
func TestLookupNeverAnswersForAnotherTenant(t *testing.T) {
	for _, lookup := range []string{"by-key/{key}", "by-tenant/{tenant}/{key}"} {
		t.Run(strings.Split(lookup, "/")[0], func(t *testing.T) {
			l := newScopedLedger(t)
			l.drop["Bearer bob"] = true
			g := startGateway(t, "--upstream", l.URL, "--reconcile-url", l.URL+"/"+lookup)
			alice := post(t, "http://"+g.addr, "shared-1", `{"amount":1}`, "Authorization", "Bearer alice")
			if alice.status != 201 || alice.replayed {
				t.Fatalf("alice: %d %s", alice.status, alice.body)
			}
			if a := post(t, "http://"+g.addr, "shared-1", `{"amount":1}`, "Authorization", "Bearer bob"); a.status != 502 {
				t.Fatalf("bob, dropped: %d %s; want 502", a.status, a.body)
			}
			aliceT, bobT := tenantOf("Bearer alice"), tenantOf("Bearer bob")
			for range 2 {
				a := post(t, "http://"+g.addr, "shared-1", `{"amount":1}`, "Authorization", "Bearer bob")
				if a.body == alice.body {
					t.Fatalf("bob's retry got alice's response %s", a.body)
				}
				l.mu.Lock()
				bobs := l.own[bobT+" shared-1"]
				l.mu.Unlock()
				switch {
				case lookup == "by-key/{key}" && (a.status != 503 || !strings.Contains(a.body, "outcome_unknown")):
					t.Errorf("bob's retry with a key-only lookup: %d %s; want 503 outcome_unknown", a.status, a.body)
				case lookup != "by-key/{key}" && (a.status != 201 || !a.replayed || a.body != bobs.body):
					t.Errorf("bob's retry with a tenant lookup: %d %s; want his own %s replayed", a.status, a.body, bobs.body)
				}
			}
			l.mu.Lock()
			execs := map[string]int{"alice": l.execs[aliceT+" shared-1"], "bob": l.execs[bobT+" shared-1"], "no tenant": l.execs[" shared-1"]}
			l.mu.Unlock()
			if execs["alice"] != 1 || execs["bob"] != 1 {
				t.Fatalf("executions %v; want one each for alice and bob under the tenants the gateway forwarded", execs)
			}
			code, body := adminCall(t, g, "GET", "/v1/keys/"+bobT+"/shared-1", "", "")
			var rec struct{ Tenant, State string }
			if json.Unmarshal([]byte(body), &rec) != nil || code != 200 || rec.Tenant != bobT {
				t.Fatalf("admin GET of bob's key under the forwarded tenant = %d %s", code, body)
			}
		})
	}
}
