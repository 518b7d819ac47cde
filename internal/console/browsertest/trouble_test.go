package browsertest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/store"
)

// Issue 31, item 13: a reconciliation whose lookup answered 500 was shown
// in a green box, as if it had settled the key. It is a red one that
// says the lookup's status, and the key stays UNKNOWN; the reason typed
// in the confirmation is in the gateway's audit of the key, which the
// key's page lists.
func TestConsoleShowsAFailedLookupAsAFailure(t *testing.T) {
	h := newHarness(t)
	h.cutCharge(t, "acme", "order-500", false) // no retry: the lookup is not claimed
	h.up.mu.Lock()
	h.up.broken[id("acme", "order-500")] = true
	h.up.mu.Unlock()
	ctx := newTab(t)
	h.startAdmin(t)
	signIn(t, ctx, h.admin)
	h.openKey(t, ctx, "acme", "order-500")
	run(t, ctx, "reconciling", chromedp.Click(chromedp.CSS("#action-reconcile")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")),
		chromedp.SendKeys(chromedp.CSS("#confirm-reason"), "INC-7: is the ledger back?"))
	res := confirm(t, ctx, "")
	if !strings.HasPrefix(res, "result failed") || !strings.Contains(res, "the lookup answered 500") || !strings.Contains(res, "stays UNKNOWN") {
		t.Fatalf("a reconciliation whose lookup answered 500 shows %q; want a failure with the status", res)
	}
	if status := eval[string](t, ctx, `document.getElementById('result').dataset.lookupStatus`); status != "500" {
		t.Fatalf("the result's lookup status = %q; want 500", status)
	}
	if state := eval[string](t, ctx, `document.getElementById('record-state').textContent`); state != "UNKNOWN" {
		t.Fatalf("after the failed reconciliation the page shows %s; want UNKNOWN", state)
	}
	if rec, err := h.g.Engine().Get(context.Background(), store.ID{Tenant: "acme", Key: "order-500"}); err != nil || rec.State != store.StateUnknown {
		t.Fatalf("after the failed reconciliation the key is %+v, %v; want UNKNOWN", rec, err)
	}
	until(t, ctx, "the key's admin changes on its page", `[...document.querySelectorAll('#audit-table tbody tr')].some((r) =>
		r.dataset.outcome === 'unchanged' && r.textContent.includes('admin-token') && r.textContent.includes('INC-7: is the ledger back?'))`)
	audit := h.auditOf(t, "acme", "order-500")
	if len(audit) != 1 {
		t.Fatalf("GET /v1/audit = %+v; want the reconciliation", audit)
	}
	if r := audit[0]; r.Action != "reconcile" || r.Outcome != "unchanged" || r.Reason != "INC-7: is the ledger back?" || r.Actor != "admin-token" {
		t.Fatalf("the audit of the reconciliation = %+v; want reconcile, unchanged, the reason typed, by admin-token", r)
	}
}

// Issue 31, item 13: when the admin API stopped answering, the console
// said "Loading…" for ever. Its calls end after a bound, the view says
// the API did not answer and offers to retry, and a retry once the API
// answers again shows the data. The console is served here through a
// proxy's name (--admin-hosts), whose answers a switch holds back.
func TestConsoleSaysWhenTheAdminAPIStopsAnswering(t *testing.T) {
	var stalled atomic.Bool
	release := make(chan struct{})
	var h *harness
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stalled.Load() && strings.HasPrefix(r.URL.Path, "/v1/") {
			select { // an API that accepted the call and never answers
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		h.g.AdminHandler().ServeHTTP(w, r)
	}))
	h = newHarness(t, func(cfg *gateway.Config) { cfg.AdminHosts = []string{front.Listener.Addr().String()} })
	front.Start()
	t.Cleanup(func() {
		close(release)
		front.Close()
	})
	h.cutCharge(t, "acme", "order-1", false)
	ctx := newTab(t)
	h.startAdmin(t)
	signIn(t, ctx, front.URL)
	run(t, ctx, "the queue", chromedp.Click(chromedp.CSS(`nav a[data-view="queue"]`)),
		chromedp.WaitVisible(chromedp.CSS("#queue-table tbody tr")))

	stalled.Store(true)
	run(t, ctx, "the queue again", chromedp.Navigate(front.URL+"/ui/#/queue?tenant=acme"))
	until(t, ctx, "the queue saying the admin API did not answer", `!!document.getElementById('load-error')`)
	got := eval[string](t, ctx, `document.getElementById('load-error').textContent`)
	if !strings.Contains(got, "did not answer") || !strings.Contains(got, "no answer within 10 s") || !eval[bool](t, ctx, `!!document.getElementById('retry')`) {
		t.Fatalf("the queue of a stalled admin API shows %q; want that it did not answer, and a retry", got)
	}
	screenshot(t, ctx, "stalled")
	stalled.Store(false)
	run(t, ctx, "retrying", chromedp.Click(chromedp.CSS("#retry")))
	until(t, ctx, "the queue after the retry", fmt.Sprintf(
		`!document.getElementById('load-error') && [...document.querySelectorAll('#queue-table tbody tr')].some((r) => r.dataset.key === %s)`, js("order-1")))

	// A key's page too.
	stalled.Store(true)
	run(t, ctx, "a key's page", chromedp.Navigate(front.URL+"/ui/#/key?tenant=acme&key=order-1"))
	until(t, ctx, "the key's page saying the admin API did not answer", `!!document.getElementById('load-error')`)
	stalled.Store(false)
	run(t, ctx, "retrying", chromedp.Click(chromedp.CSS("#retry")))
	until(t, ctx, "the key's page after the retry", `document.getElementById('record-state')?.textContent === 'UNKNOWN'`)
}
