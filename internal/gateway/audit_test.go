package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
)

// syncBuffer is a log a test reads while the gateway writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// changes returns the "admin change" lines of the log.
func (b *syncBuffer) changes(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		var m map[string]any
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "admin change" {
			out = append(out, m)
		}
	}
	return out
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// writeTokens writes a tokens file and returns its path.
func writeTokens(t *testing.T, path, text string) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "admin-tokens")
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// asToken calls g's admin API as an operator's tool would, with the token.
func asToken(g *Gateway, token, method, path, body string) *httptest.ResponseRecorder {
	req := adminRequest(method, path, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.RemoteAddr = "127.0.0.1:40000"
	return call(g, req)
}

// Issue 31, item 8: resolve, delete and force-delete, the changes that can
// let a key run twice, logged nothing, and anyone with the one token could
// make them. Every change (and every refused attempt) is one "admin
// change" line, whatever --log-level says, with who (the token's name),
// from where, the key, its fence, its state before and after, the reason
// given and the outcome; it is counted in idem_admin_changes_total and
// kept for GET /v1/audit; a read-only token reads but changes nothing.
func TestAdminChangesAreAudited(t *testing.T) {
	logs := &syncBuffer{}
	quiet := new(slog.LevelVar)
	quiet.Set(slog.LevelError) // --log-level error: the audit is no verbosity
	tokens := writeTokens(t, "", "# name role token\nalice read-write alice-s3cret-token\n\nbob read-only bob-s3cret-token\n")
	g := newTestGateway(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1"), AdminToken: adminToken, AdminTokensFile: tokens,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: quiet}))})
	e := g.Engine()
	a, b, c := store.ID{Tenant: "acme", Key: "a"}, store.ID{Tenant: "acme", Key: "b"}, store.ID{Tenant: "", Key: "c"}
	fa, fb, fc := unknownKey(t, e, a), unknownKey(t, e, b), unknownKey(t, e, c)

	if rec := asToken(g, "bob-s3cret-token", "GET", "/v1/keys/acme/a", ""); rec.Code != 200 {
		t.Fatalf("a read-only token's GET = %d %s; want 200", rec.Code, rec.Body)
	}
	wantProblemIn(t, "a read-only token's resolve", asToken(g, "bob-s3cret-token", "POST", "/v1/keys/acme/a/resolve",
		fmt.Sprintf(`{"fence":%d,"outcome":"not_executed","reason":"bob tries"}`, fa)), 403, CodeAdminForbidden)
	wantProblemIn(t, "a read-only token's delete", asToken(g, "bob-s3cret-token", "DELETE", "/v1/keys/acme/a?force=true", ""), 403, CodeAdminForbidden)
	wantProblemIn(t, "an unknown token's resolve", asToken(g, "mallory", "POST", "/v1/keys/acme/a/resolve",
		fmt.Sprintf(`{"fence":%d,"outcome":"not_executed"}`, fa)), 401, CodeAdminUnauthorized)
	if rec, err := e.Get(context.Background(), a); err != nil || rec.State != store.StateUnknown {
		t.Fatalf("after the read-only token's attempts: %+v, %v; want the key UNKNOWN", rec, err)
	}
	wantProblemIn(t, "a reason over 1 KiB", asToken(g, "alice-s3cret-token", "POST", "/v1/keys/acme/a/resolve",
		fmt.Sprintf(`{"fence":%d,"outcome":"not_executed","reason":%q}`, fa, strings.Repeat("x", maxReason+1))), 400, CodeResolveInvalid)
	steps := []struct {
		token, method, path, body string
		status                    int
	}{
		{"alice-s3cret-token", "POST", "/v1/keys/acme/a/resolve",
			fmt.Sprintf(`{"fence":%d,"outcome":"completed","status":201,"body":"ok","reason":"ticket 7: charged"}`, fa), 204},
		{"alice-s3cret-token", "DELETE", "/v1/keys/acme/b", `{"reason":"try a plain delete"}`, 409},
		{adminToken, "POST", "/v1/keys/acme/b/resolve", fmt.Sprintf(`{"fence":%d,"outcome":"not_executed"}`, fb+1), 409},
		{adminToken, "POST", "/v1/keys/acme/b/resolve", fmt.Sprintf(`{"fence":%d,"outcome":"not_executed","reason":"never ran"}`, fb), 204},
		{"alice-s3cret-token", "DELETE", "/v1/keys/-/c?force=true", `{"reason":"ticket 9"}`, 204},
		{"alice-s3cret-token", "DELETE", "/v1/keys/acme/a", "", 204},
	}
	for _, s := range steps {
		if rec := asToken(g, s.token, s.method, s.path, s.body); rec.Code != s.status {
			t.Fatalf("%s %s = %d %s; want %d", s.method, s.path, rec.Code, rec.Body, s.status)
		}
	}
	want := []AuditRecord{
		{Actor: "bob", Action: "resolve", Tenant: "acme", Key: "a", Fence: fa, StateBefore: "UNKNOWN", StateAfter: "UNKNOWN", Outcome: "forbidden", Status: 403, Code: CodeAdminForbidden},
		{Actor: "bob", Action: "force_delete", Tenant: "acme", Key: "a", Fence: fa, StateBefore: "UNKNOWN", StateAfter: "UNKNOWN", Outcome: "forbidden", Status: 403, Code: CodeAdminForbidden},
		{Actor: "alice", Action: "resolve", Tenant: "acme", Key: "a", Fence: fa, StateBefore: "UNKNOWN", StateAfter: "UNKNOWN", Outcome: "unchanged", Status: 400, Code: CodeResolveInvalid},
		{Actor: "alice", Action: "resolve", Tenant: "acme", Key: "a", Fence: fa, StateBefore: "UNKNOWN", StateAfter: "COMPLETED", Resolution: "completed", Reason: "ticket 7: charged", Outcome: "completed", Status: 204},
		{Actor: "alice", Action: "delete", Tenant: "acme", Key: "b", Fence: fb, StateBefore: "UNKNOWN", StateAfter: "UNKNOWN", Reason: "try a plain delete", Outcome: "unchanged", Status: 409, Code: CodeKeyUnknown},
		{Actor: "admin-token", Action: "resolve", Tenant: "acme", Key: "b", Fence: fb, StateBefore: "UNKNOWN", StateAfter: "UNKNOWN", Resolution: "not_executed", Outcome: "unchanged", Status: 409, Code: CodeStaleFence},
		{Actor: "admin-token", Action: "resolve", Tenant: "acme", Key: "b", Fence: fb, StateBefore: "UNKNOWN", StateAfter: "absent", Resolution: "not_executed", Reason: "never ran", Outcome: "not_executed", Status: 204},
		{Actor: "alice", Action: "force_delete", Tenant: "", Key: "c", Fence: fc, StateBefore: "UNKNOWN", StateAfter: "absent", Reason: "ticket 9", Outcome: "deleted", Status: 204},
		{Actor: "alice", Action: "delete", Tenant: "acme", Key: "a", Fence: fa, StateBefore: "COMPLETED", StateAfter: "absent", Outcome: "deleted", Status: 204},
	}
	lines := logs.changes(t)
	if len(lines) != len(want) {
		t.Fatalf("%d admin change lines; want %d:\n%s", len(lines), len(want), logs)
	}
	for i, w := range want {
		l := lines[i]
		got := AuditRecord{Actor: l["actor"].(string), Action: l["action"].(string), Tenant: l["tenant"].(string), Key: l["key"].(string),
			Fence: int64(l["fence"].(float64)), StateBefore: l["state_before"].(string), StateAfter: l["state_after"].(string),
			Resolution: l["resolution"].(string), Reason: l["reason"].(string), Outcome: l["outcome"].(string),
			Status: int(l["status"].(float64)), Code: l["code"].(string)}
		if got != w || l["remote"] != "127.0.0.1:40000" || l["level"] != "INFO" {
			t.Errorf("admin change %d = %v\nwant %+v from 127.0.0.1:40000", i, l, w)
		}
	}
	for _, secret := range []string{adminToken, "alice-s3cret-token", "bob-s3cret-token"} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("the log holds a token: %s", logs)
		}
	}
	samples := scrape(t, g)
	for series, n := range map[string]float64{
		`idem_admin_changes_total{action="resolve",outcome="forbidden"}`:         1,
		`idem_admin_changes_total{action="force_delete",outcome="forbidden"}`:    1,
		`idem_admin_changes_total{action="resolve",outcome="unchanged"}`:         2,
		`idem_admin_changes_total{action="resolve",outcome="completed"}`:         1,
		`idem_admin_changes_total{action="resolve",outcome="not_executed"}`:      1,
		`idem_admin_changes_total{action="delete",outcome="unchanged"}`:          1,
		`idem_admin_changes_total{action="delete",outcome="deleted"}`:            1,
		`idem_admin_changes_total{action="force_delete",outcome="deleted"}`:      1,
		`idem_admin_changes_total{action="reconcile",outcome="not_executed"}`:    0,
		`idem_admin_changes_total{action="force_delete",outcome="failed"}`:       0,
		`idem_admin_changes_total{action="reconcile",outcome="completed"}`:       0,
		`idem_admin_changes_total{action="delete",outcome="forbidden"}`:          0,
		`idem_admin_changes_total{action="reconcile",outcome="unchanged"}`:       0,
		`idem_admin_changes_total{action="resolve",outcome="failed"}`:            0,
		`idem_admin_changes_total{action="force_delete",outcome="unchanged"}`:    0,
		`idem_admin_changes_total{action="reconcile",outcome="forbidden"}`:       0,
		`idem_admin_changes_total{action="delete",outcome="failed"}`:             0,
		`idem_admin_changes_total{action="reconcile",outcome="failed"}`:          0,
		`idem_admin_changes_total{action="resolve",outcome="deleted"}`:           -1, // no such series
		`idem_admin_changes_total{action="delete",outcome="completed"}`:          -1,
		`idem_admin_changes_total{action="force_delete",outcome="completed"}`:    -1,
		`idem_admin_changes_total{action="reconcile",outcome="deleted"}`:         -1,
		`idem_admin_changes_total{action="delete",outcome="not_executed"}`:       -1,
		`idem_admin_changes_total{action="force_delete",outcome="not_executed"}`: -1,
	} {
		got, ok := samples[series]
		if n < 0 && ok || n >= 0 && (!ok || got != n) {
			t.Errorf("%s = %v (present %v); want %v", series, got, ok, n)
		}
	}

	// GET /v1/audit: the key's changes, newest first, to a read-only token too.
	rec := asToken(g, "bob-s3cret-token", "GET", "/v1/audit?tenant=acme&key=a", "")
	page := decode[AuditPage](t, rec)
	var actions []string
	for _, r := range page.Records {
		actions = append(actions, r.Actor+":"+r.Action+":"+r.Outcome)
	}
	if rec.Code != 200 || strings.Join(actions, " ") != "alice:delete:deleted alice:resolve:completed alice:resolve:unchanged bob:force_delete:forbidden bob:resolve:forbidden" {
		t.Fatalf("GET /v1/audit of acme/a = %d %v; want its five records, newest first", rec.Code, actions)
	}
	if page := decode[AuditPage](t, asToken(g, adminToken, "GET", "/v1/audit?tenant=-", "")); len(page.Records) != 1 || page.Records[0].Key != "c" {
		t.Fatalf("GET /v1/audit?tenant=- = %+v; want the empty tenant's one record", page.Records)
	}
	if page := decode[AuditPage](t, asToken(g, adminToken, "GET", "/v1/audit", "")); len(page.Records) != len(want) {
		t.Fatalf("GET /v1/audit = %d records; want %d", len(page.Records), len(want))
	}
	wantProblemIn(t, "GET /v1/audit without a token", asToken(g, "", "GET", "/v1/audit", ""), 401, CodeAdminUnauthorized)
}

// The audit ring keeps the last auditCapacity records, newest first.
func TestAuditRingIsBounded(t *testing.T) {
	g := newTestGateway(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1")})
	for i := range auditCapacity + 5 {
		g.audit.add(context.Background(), AuditRecord{Time: time.Unix(int64(i), 0), Key: fmt.Sprint(i), Action: ActionDelete, Outcome: OutcomeDeleted})
	}
	all := g.audit.find(func(AuditRecord) bool { return true })
	if len(all) != auditCapacity || all[0].Key != fmt.Sprint(auditCapacity+4) || all[len(all)-1].Key != "5" {
		t.Fatalf("%d records from %s to %s; want %d, from %d down to 5", len(all), all[0].Key, all[len(all)-1].Key, auditCapacity, auditCapacity+4)
	}
}

// Issue 31, item 8: several tokens, each read-only or read-write, read
// from --admin-tokens-file and read again on a reload; a bad file refuses
// to start, and a bad reload keeps the tokens that run.
func TestAdminTokensFileAndReload(t *testing.T) {
	path := writeTokens(t, "", "ops read-write ops-s3cret-token-1\nviewer read-only viewer-s3cret-token-1\n")
	g := newTestGateway(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1"), AdminTokensFile: path})
	get := func(token string) int { return asToken(g, token, "GET", "/v1/stats", "").Code }
	if get("ops-s3cret-token-1") != 200 || get("viewer-s3cret-token-1") != 200 || get("") != 401 || get("ops-s3cret-token-2") != 401 {
		t.Fatalf("before the reload: ops %d, viewer %d, none %d, next %d; want 200 200 401 401",
			get("ops-s3cret-token-1"), get("viewer-s3cret-token-1"), get(""), get("ops-s3cret-token-2"))
	}
	reload := func() error { return g.Reload(func() (Config, error) { return g.cfg, nil }) }
	writeTokens(t, path, "ops read-write ops-s3cret-token-2\n")
	if err := reload(); err != nil {
		t.Fatal(err)
	}
	if get("ops-s3cret-token-1") != 401 || get("viewer-s3cret-token-1") != 401 || get("ops-s3cret-token-2") != 200 {
		t.Fatalf("after the reload: old ops %d, viewer %d, new ops %d; want 401 401 200", get("ops-s3cret-token-1"), get("viewer-s3cret-token-1"), get("ops-s3cret-token-2"))
	}
	writeTokens(t, path, "ops read-write ops-s3cret-token-3\nops read-only ops-s3cret-token-4\n")
	if err := reload(); err == nil || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), "ops-s3cret-token") {
		t.Fatalf("a reload of a file with a name twice = %v; want an error naming the line, without the tokens", err)
	}
	if get("ops-s3cret-token-2") != 200 || get("ops-s3cret-token-3") != 401 {
		t.Fatal("a bad reload changed the tokens")
	}
	os.Remove(path)
	if err := reload(); err == nil || get("ops-s3cret-token-2") != 200 {
		t.Fatalf("a reload without the file = %v; want an error, the tokens kept", err)
	}
	// An empty file is a file of no tokens: every call refused, not an
	// API left open.
	writeTokens(t, path, "# every token revoked\n")
	if err := reload(); err != nil || get("ops-s3cret-token-2") != 401 || get("") != 401 {
		t.Fatalf("a reload of an empty file = %v, %d, %d; want every call refused", err, get("ops-s3cret-token-2"), get(""))
	}

	for text, want := range map[string]string{
		"ops read-write":        "line 1: want \"name role token\"",
		"ops admin tok-1":       `line 1: the role (2nd field)`,
		"o/ps read-write tok-1": `line 1: the name (1st field)`,
		"a read-only tok-1-0123456789ab\nb read-write tok-1-0123456789ab": "line 2: the token (3rd field) is line 1's too",
		"a read-only tok-1-0123456789ab\na read-write tok-2-0123456789ab": "line 2: the name (1st field) is line 1's too",
		"ops read-write tok-1":                     "line 1: the token (3rd field) is shorter than 16 bytes",
		"admin-token read-only tok-2-0123456789ab": "line 1: the name (1st field) is --admin-token's",
		"other read-only " + adminToken:            "line 1: the token (3rd field) is --admin-token's",
	} {
		_, err := New(Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: newMemStore(t), Admin: testAdmin,
			AdminToken: adminToken, AdminTokensFile: writeTokens(t, "", text)})
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "tok-1") || strings.Contains(err.Error(), adminToken) {
			t.Errorf("New with the tokens file %q = %v; want an error with %q, no token", text, err, want)
		}
	}
	if _, err := New(Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: newMemStore(t), Admin: "0.0.0.0:9090",
		AdminTokensFile: writeTokens(t, "", "ops read-write tok-0123456789abcdef\n")}); err != nil {
		t.Errorf("a network --admin with --admin-tokens-file: %v; want it accepted (it has tokens)", err)
	}
}

// A tokens file's line with its fields out of order ("name token role",
// "token name role") was refused with an error that quoted the token as
// the bad role or name, at start and in the log of a reload. The error
// names the line and the field, never the token.
func TestAdminTokensFileErrorsHideMisplacedTokens(t *testing.T) {
	const secret = "Zk3+9qW/SEKRIT=="
	for _, text := range []string{
		"oncall " + secret + " read-write",
		secret + " oncall read-write",
		"0f3a9c77e1b2d4SEKRIT oncall read-write", // a valid name, but the token
		"# tokens\noncall read-write ok-s3cret-token-1\ngrafana " + secret + " read-only",
	} {
		path := writeTokens(t, "", text)
		_, err := New(Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: newMemStore(t), Admin: testAdmin, AdminTokensFile: path})
		if err == nil || !strings.Contains(err.Error(), "line ") || strings.Contains(err.Error(), "SEKRIT") {
			t.Errorf("New with the tokens file %q = %v; want an error naming the line, without the token", text, err)
		}
		logs := &syncBuffer{}
		g := newTestGateway(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1"), AdminTokensFile: writeTokens(t, "", "ops read-write ops-s3cret-token\n"),
			Logger: slog.New(slog.NewJSONHandler(logs, nil))})
		writeTokens(t, g.cfg.AdminTokensFile, text)
		if err := g.Reload(func() (Config, error) { return g.cfg, nil }); err == nil || strings.Contains(logs.String(), "SEKRIT") {
			t.Errorf("a reload of the tokens file %q = %v, logged:\n%s\nwant an error, and no token in the log", text, err, logs)
		}
	}
}

// A tokens-file line written "token role name" was accepted: the 64-hex
// token is a valid name and the name became the bearer token, so the
// secret was the actor of every audit record (GET /v1/audit, to any
// read-only token) and "oncall" opened the admin API. A token shorter than
// 16 bytes is refused, and no error quotes a field that may be the token.
func TestAdminTokensFileRefusesTokenRoleName(t *testing.T) {
	secret := strings.Repeat("3f9c", 16)
	for _, text := range []string{
		secret + " read-write oncall",
		secret + " read-write grafana-dashboards\n" + secret + " read-only grafana-dashboards-2",
		secret + " read-write oncall\x01-on-the-pager",
		secret + " read-write " + adminToken,
	} {
		cfg := Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: newMemStore(t), Admin: testAdmin,
			AdminToken: adminToken, AdminTokensFile: writeTokens(t, "", text)}
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "line ") || strings.Contains(err.Error(), secret) {
			t.Errorf("New with the tokens file %q = %v; want an error naming the line, without the token", text, err)
		}
		logs := &syncBuffer{}
		g := newTestGateway(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1"), AdminToken: adminToken,
			AdminTokensFile: writeTokens(t, "", "ops read-write ops-s3cret-token\n"), Logger: slog.New(slog.NewJSONHandler(logs, nil))})
		writeTokens(t, g.cfg.AdminTokensFile, text)
		err := g.Reload(func() (Config, error) { return g.cfg, nil })
		if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(logs.String(), secret) {
			t.Errorf("a reload of the tokens file %q = %v, logged:\n%s\nwant an error, and no token in either", text, err, logs)
		}
		if code := asToken(g, "oncall", "GET", "/v1/stats", "").Code; code != 401 {
			t.Errorf("after a reload of %q, the name as a token: %d; want 401", text, code)
		}
		if code := asToken(g, "ops-s3cret-token", "GET", "/v1/stats", "").Code; code != 200 {
			t.Errorf("after a bad reload of %q, the running token: %d; want 200 (kept)", text, code)
		}
	}
}

// A line written "token role name" with a name of 16 bytes or more was
// accepted: the secret became the actor of every audit record and log
// line, and the name the bearer token. A token of lowercase words or a
// name of hex digits is refused, at start and at a reload, naming the
// line, never either field (either may be the secret).
func TestAdminTokensFileRefusesLongNameSwapped(t *testing.T) {
	const hex, name = "0123456789abcdef0123456789abcdef", "grafana-dashboards"
	for _, text := range []string{
		hex + " read-write " + name,                    // the token is a word
		hex + " read-only " + name + "-2",              // the name is hex
		"deadbeefcafef00d read-write " + name + ".ops", // openssl rand -hex 8, the shortest
		"kXq-7nB_2vLm9pRtZs4W read-write " + name,      // a base64url secret: only the token tells
		"ops read-write ops-s3cret-token\n" + hex + " read-only " + name,
	} {
		_, err := New(Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: newMemStore(t), Admin: testAdmin,
			AdminTokensFile: writeTokens(t, "", text)})
		if err == nil || !strings.Contains(err.Error(), "line ") || !strings.Contains(err.Error(), "in that order?") ||
			strings.Contains(err.Error(), name) || strings.Contains(err.Error(), "0123456789abcdef") || strings.Contains(err.Error(), "deadbeef") || strings.Contains(err.Error(), "kXq") {
			t.Errorf("New with the tokens file %q = %v; want an error naming the line, quoting neither field", text, err)
		}
		logs := &syncBuffer{}
		g := newTestGateway(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1"),
			AdminTokensFile: writeTokens(t, "", "ops read-write ops-s3cret-token\n"), Logger: slog.New(slog.NewJSONHandler(logs, nil))})
		writeTokens(t, g.cfg.AdminTokensFile, text)
		err = g.Reload(func() (Config, error) { return g.cfg, nil })
		if l := logs.String(); err == nil || strings.Contains(l, "0123456789abcdef") || strings.Contains(l, "deadbeef") || strings.Contains(l, "kXq") {
			t.Errorf("a reload of the tokens file %q = %v; want an error, and no secret in the log", text, err)
		}
		if code := asToken(g, name, "GET", "/v1/stats", "").Code; code != 401 {
			t.Errorf("after a reload of %q, the name as a token: %d; want 401", text, code)
		}
	}
}

// The rule that refuses a swapped line takes the secrets that openssl
// rand makes (hex, base64, with '+', '/', '=') and names with digits,
// capitals, or all digits (a numeric id).
func TestAdminTokensFileTakesRandomTokens(t *testing.T) {
	text := "# name role token\n" +
		"oncall read-write 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n" +
		"grafana-2 read-only q0Vh3Jd8Rk+2xN/5aLmT7wYs\n" +
		"Grafana-Dashboards read-only Zk3Lp9qWx7Tb2Rm5Vn8Ys4Hc6Jd1Gf0A=\n" +
		"123456789012345678901 read-only kXq-7nB_2vLm9pRtZs4W\n" +
		"build.bot@example.com read-only AbCdEfGhIjKlMnOpQr\n"
	g := newTestGateway(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1"), AdminTokensFile: writeTokens(t, "", text)})
	for _, token := range []string{"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "q0Vh3Jd8Rk+2xN/5aLmT7wYs",
		"Zk3Lp9qWx7Tb2Rm5Vn8Ys4Hc6Jd1Gf0A=", "kXq-7nB_2vLm9pRtZs4W", "AbCdEfGhIjKlMnOpQr"} {
		if code := asToken(g, token, "GET", "/v1/stats", "").Code; code != 200 {
			t.Errorf("GET /v1/stats with the token %q: %d; want 200", token, code)
		}
	}
}

// An --admin-token shorter than a secret is refused at start, naming the
// flag, never the value.
func TestShortAdminTokenRefused(t *testing.T) {
	_, err := New(Config{Upstream: mustURL(t, "http://127.0.0.1:1"), Store: newMemStore(t), Admin: testAdmin, AdminToken: "oncall"})
	if err == nil || !strings.Contains(err.Error(), "--admin-token") || strings.Contains(err.Error(), "oncall") {
		t.Errorf("New(--admin-token oncall) = %v; want an error naming --admin-token, without the token", err)
	}
}

// The audit record of a change is made before its path's tenant and key
// are checked: a read-only token's DELETE of a 900 KiB key (the admin
// listener reads 1 MiB of header) was kept whole, in the ring of 1,000
// (a gigabyte) and in the log line. Each is kept to the length a valid
// one can have, marked as cut.
func TestAuditClipsLongPaths(t *testing.T) {
	logs := &syncBuffer{}
	tokens := writeTokens(t, "", "bob read-only bob-s3cret-token\n")
	g := newTestGateway(t, Config{Upstream: mustURL(t, "http://127.0.0.1:1"), AdminTokensFile: tokens,
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	long := strings.Repeat("k", 900<<10)
	wantProblemIn(t, "a read-only token's delete of a long key", asToken(g, "bob-s3cret-token", "DELETE", "/v1/keys/"+long+"/"+long, ""),
		403, CodeAdminForbidden)
	wantProblemIn(t, "a read-only token's resolve with a key that is not UTF-8", asToken(g, "bob-s3cret-token", "POST",
		"/v1/keys/acme/"+strings.Repeat("é", 200)+"%ff/resolve", `{}`), 403, CodeAdminForbidden)
	all := g.audit.find(func(AuditRecord) bool { return true })
	if len(all) != 2 {
		t.Fatalf("%d audit records; want 2", len(all))
	}
	for _, rec := range all {
		if len(rec.Tenant) > store.MaxKeyLength+32 || len(rec.Key) > store.MaxKeyLength+32 {
			t.Errorf("audit record of %s: tenant %d bytes, key %d bytes; want each at most about %d", rec.Action, len(rec.Tenant), len(rec.Key), store.MaxKeyLength)
		}
	}
	if !strings.HasSuffix(all[1].Key, fmt.Sprintf("... (%d bytes)", len(long))) {
		t.Errorf("the long key is kept as %.40q...; want it marked as cut", all[1].Key)
	}
	if len(logs.String()) > 4<<10 {
		t.Errorf("the log is %d bytes for two audit lines; want the paths cut", len(logs.String()))
	}
	if want := strings.Repeat("é", store.MaxKeyLength/2) + "... (401 bytes)"; all[0].Key != want {
		t.Errorf("the key of 401 bytes is kept as %q; want %q: cut at a whole character", all[0].Key, want)
	}
}
