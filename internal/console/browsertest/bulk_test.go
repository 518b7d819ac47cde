package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/store"
)

// Issue 36, item 4: an UNKNOWN key shows its request (method, path,
// route) and when it was sent, in the queue and on its page.
func TestConsoleShowsTheRequestOfAnUnknownKey(t *testing.T) {
	h := newHarness(t)
	h.cutCharge(t, "acme", "order-77", false)
	ctx := newTab(t)
	h.startAdmin(t)
	signIn(t, ctx, h.admin)
	run(t, ctx, "the queue", chromedp.Navigate(h.admin+"/ui/#/queue"), chromedp.WaitVisible(chromedp.CSS("#queue-table tbody tr")))
	const label = "POST /v1/charges route=charges"
	cells := eval[[]string](t, ctx, `[...document.querySelectorAll('#queue-table tbody tr td')].map((c) => c.textContent)`)
	if len(cells) != 6 || cells[2] != label || !strings.HasSuffix(cells[3], " ago") {
		t.Fatalf("the queue's row of a cut request = %q; want its request %q and when it was sent", cells, label)
	}
	openFromQueue(t, ctx, "acme", "order-77")
	if got := eval[string](t, ctx, `document.getElementById('record-label').textContent`); got != label {
		t.Fatalf("the key's page shows the request %q; want %q", got, label)
	}
	if sent := eval[string](t, ctx, `document.getElementById('record-sent').textContent`); sent == "" {
		t.Fatal("the key's page does not say when the request was sent")
	}
}

// unknownKey makes tenant/key UNKNOWN through the engine, with the label
// the gateway gives a request of route.
func unknownKey(t *testing.T, e *idem.Engine, tenant, key, route string) {
	t.Helper()
	ctx := context.Background()
	a, err := e.Begin(ctx, idem.Request{Tenant: tenant, Key: key, Fingerprint: "fp", Label: "POST /v1/" + route + " route=" + route})
	if err != nil || a.Outcome != idem.Acquired {
		t.Fatalf("Begin(%s/%s) = %+v, %v", tenant, key, a, err)
	}
	if err := a.Lease.MarkUnknown(ctx, "the request was sent upstream and no complete response came back"); err != nil {
		t.Fatal(err)
	}
}

// auditOf returns the gateway's audit records of tenant/key.
func (h *harness) auditOf(t *testing.T, tenant, key string) []gateway.AuditRecord {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.admin+"/v1/audit?tenant="+tenant+"&key="+key, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page gateway.AuditPage
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	return page.Records
}

// Issue 36, item 4: the keys the queue lists, filtered by tenant and
// route, are resolved as not executed at once, after one confirmation
// that states their count, each change audited on its own; the keys the
// filter left out are untouched. A bulk reconciliation says which keys
// it settled and which it did not; a cancelled one sends nothing.
func TestConsoleSettlesTheFilteredQueueAtOnce(t *testing.T) {
	h := newHarness(t)
	e := h.g.Engine()
	picked := []string{"c-1", "c-2", "c-3"}
	for _, k := range picked {
		unknownKey(t, e, "acme", k, "charges")
	}
	unknownKey(t, e, "acme", "r-1", "refunds")
	unknownKey(t, e, "globex", "c-9", "charges")
	h.cutCharge(t, "ledger", "found-1", false)
	h.cutCharge(t, "ledger", "missing-1", false)
	h.up.mu.Lock()
	h.up.found[id("ledger", "found-1")] = true
	h.up.mu.Unlock()
	ctx := newTab(t)
	h.startAdmin(t)
	signIn(t, ctx, h.admin)

	run(t, ctx, "the queue of acme's charges", chromedp.Navigate(h.admin+"/ui/#/queue?tenant=acme&route=charges"),
		chromedp.WaitVisible(chromedp.CSS("#bulk-not-executed")))
	if got := rows(t, ctx); len(got) != 3 {
		t.Fatalf("acme's charges in the queue: %v; want its 3 keys", got)
	}
	run(t, ctx, "a bulk resolution, cancelled", chromedp.Click(chromedp.CSS("#bulk-not-executed")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")), chromedp.Click(chromedp.CSS("#confirm-cancel")),
		chromedp.WaitNotPresent(chromedp.CSS("#confirm[open]")), painted)
	run(t, ctx, "a bulk resolution", chromedp.Click(chromedp.CSS("#bulk-not-executed")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")),
		chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "INC-9: the charges API was down, nothing ran"))
	if got := eval[string](t, ctx, `document.getElementById('confirm').textContent`); !strings.Contains(got, "Resolve 3 UNKNOWN keys as not executed?") ||
		!strings.Contains(got, "3 keys listed in the queue (tenant acme, route charges, any age)") {
		t.Fatalf("the bulk confirmation says %q; want the count, 3, and the filters", got)
	}
	screenshot(t, ctx, "bulk-confirm")
	run(t, ctx, "confirming", chromedp.Click(chromedp.CSS("#confirm-ok")), chromedp.WaitVisible(chromedp.CSS("#bulk-result")))
	if got := eval[string](t, ctx, `document.getElementById('bulk-result').className + ': ' + document.getElementById('bulk-result').textContent`); got != "result ok: 3 of 3 settled." {
		t.Fatalf("the bulk resolution's result = %q; want all 3 settled", got)
	}
	until(t, ctx, "the queue without them", `document.querySelectorAll('#queue-table tbody tr').length === 0`)
	for _, k := range picked {
		if _, err := e.Get(context.Background(), store.ID{Tenant: "acme", Key: k}); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("acme/%s after the bulk resolution: %v; want released", k, err)
		}
		audit := h.auditOf(t, "acme", k)
		if len(audit) != 1 || audit[0].Action != "resolve" || audit[0].Resolution != "not_executed" || audit[0].Reason != "INC-9: the charges API was down, nothing ran" {
			t.Fatalf("the audit of acme/%s = %+v; want one resolution as not executed, with the reason", k, audit)
		}
	}
	for _, k := range []store.ID{{Tenant: "acme", Key: "r-1"}, {Tenant: "globex", Key: "c-9"}} {
		if rec, err := e.Get(context.Background(), k); err != nil || rec.State != store.StateUnknown {
			t.Fatalf("%v, which the filter left out: %+v, %v; want still UNKNOWN", k, rec, err)
		}
	}

	run(t, ctx, "the ledger's queue", chromedp.Navigate(h.admin+"/ui/#/queue?tenant=ledger"),
		chromedp.WaitVisible(chromedp.CSS("#bulk-reconcile")))
	run(t, ctx, "a bulk reconciliation", chromedp.Click(chromedp.CSS("#bulk-reconcile")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")), chromedp.Click(chromedp.CSS("#confirm-ok")),
		chromedp.WaitVisible(chromedp.CSS("#bulk-result")))
	got := eval[string](t, ctx, `document.getElementById('bulk-result').className + ': ' + document.getElementById('bulk-result').textContent`)
	if !strings.HasPrefix(got, "result failed: 1 of 2 settled, 1 not.") || !strings.Contains(got, "missing-1: not settled") {
		t.Fatalf("the bulk reconciliation's result = %q; want found-1 settled, missing-1 not", got)
	}
	screenshot(t, ctx, "bulk-result")
	if rec, err := e.Get(context.Background(), store.ID{Tenant: "ledger", Key: "found-1"}); err != nil || rec.State != store.StateCompleted {
		t.Fatalf("ledger/found-1 after the bulk reconciliation: %+v, %v; want COMPLETED by the lookup", rec, err)
	}
	for _, k := range []string{"found-1", "missing-1"} {
		if audit := h.auditOf(t, "ledger", k); len(audit) != 1 || audit[0].Action != "reconcile" {
			t.Fatalf("the audit of ledger/%s = %+v; want one reconciliation", k, audit)
		}
	}
}
