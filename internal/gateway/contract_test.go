package gateway

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// Issue 36, item 7: a lookup written to the earlier contract (its 200
// echoes the key only) settled no key and said so with one WARN line per
// key, like any failed lookup. It is an error: an ERROR line that names
// what is missing and the fix, and idem_reconcile_contract_errors_total by
// what is missing. The key stays UNKNOWN. A lookup that echoes another
// attempt's fence keeps the contract: that is no breach.
func TestLookupThatBreaksTheContractIsLoud(t *testing.T) {
	up := newWireUpstream(t)
	up.answer = func(w http.ResponseWriter, r *http.Request, _ string) { w.WriteHeader(http.StatusBadGateway) } // UNKNOWN
	fenceOf := func(key string) string {
		for _, s := range up.requests() {
			if s.header.Get(idemhttp.HeaderKey) == key {
				return s.header.Get(FenceHeader)
			}
		}
		return ""
	}
	up.lookup = func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("key")
		switch {
		case strings.HasPrefix(key, "keyonly"): // the earlier contract
			lookupAnswer(w, r, "", "")
		case strings.HasPrefix(key, "notenant"):
			lookupAnswer(w, r, fenceOf(key), "")
		case strings.HasPrefix(key, "otherfence"):
			lookupAnswer(w, r, "999999", r.Header.Get(TenantIDHeader))
		}
	}
	var logs syncBuffer
	u, _ := url.Parse(up.URL)
	g := newTestGateway(t, Config{Upstream: u, ReconcileURL: up.URL + "/lookup/{key}",
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	for _, c := range []struct {
		key           string
		fence, tenant float64 // the counts after this key's retry
	}{{"otherfence-1", 0, 0}, {"keyonly-1", 1, 1}, {"keyonly-2", 2, 2}, {"notenant-1", 2, 3}} {
		hdr := []string{idemhttp.HeaderKey, c.key, "Authorization", "Bearer alice"}
		send(t, srv, http.MethodPost, `{}`, hdr...)
		if resp, body := send(t, srv, http.MethodPost, `{}`, hdr...); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, idemhttp.CodeOutcomeUnknown) {
			t.Fatalf("%s: retry %d %s; want 503 outcome_unknown: the lookup proved nothing", c.key, resp.StatusCode, body)
		}
		m := scrape(t, g)
		if f, tn := m[`idem_reconcile_contract_errors_total{missing="fence"}`], m[`idem_reconcile_contract_errors_total{missing="tenant"}`]; f != c.fence || tn != c.tenant {
			t.Errorf("after %s: contract errors fence %v, tenant %v; want %v, %v", c.key, f, tn, c.fence, c.tenant)
		}
	}
	errs := logs.lines(t, "idem: the reconcile lookup breaks its contract")
	if len(errs) != 1 { // one a minute at most: the metric counts every one
		t.Fatalf("%d ERROR lines about the contract; want 1 (the first), log:\n%s", len(errs), logs.String())
	}
	line := errs[0]
	msg, _ := line["err"].(string)
	if line["level"] != "ERROR" || line["missing"] != "fence,tenant" ||
		!strings.Contains(msg, "without Idempotency-Fence and Idempotency-Tenant") || !strings.Contains(msg, "docs/reconcile.md") {
		t.Errorf("the contract's ERROR line = %v; want level ERROR, missing fence,tenant, the headers and the fix", line)
	}
}
