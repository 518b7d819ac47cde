package browsertest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// An operator settles real UNKNOWN keys through the console: the keys of
// requests whose connection the upstream cut after charging are listed;
// one resolved as completed is replayed to the next retry, with no second
// charge; one resolved as not executed runs on the next retry; one the
// lookup knows is reconciled on demand; one is deleted.
func TestConsoleSettlesUnknownKeys(t *testing.T) {
	h := newHarness(t)
	unknown := [][2]string{{"acme", "order-1001"}, {"acme", "order-1002"}, {"acme", "order-1003"},
		{"acme", "order-1004"}, {"globex", "inv-7"}, {"globex", "inv-8"}}
	for _, k := range unknown {
		// inv-7 gets no retry: the retry's reconciliation would keep
		// the console's "reconcile now" from asking for seconds.
		h.cutCharge(t, k[0], k[1], k[1] != "inv-7")
	}
	h.up.mu.Lock()
	h.up.found[id("globex", "inv-7")] = true // the upstream's lookup finds this one
	h.up.mu.Unlock()
	ctx := newTab(t)
	h.startAdmin(t)
	signIn(t, ctx, h.admin)
	before := h.sent.Load()
	h.traffic(t)
	sent := h.sent.Load() - before
	run(t, ctx, "the overview again", chromedp.Reload())
	until(t, ctx, "the overview's charts and the requests sent", fmt.Sprintf(
		`document.querySelectorAll('.charts figure polyline').length >= 3 && document.querySelector('[data-tile="Requests"]')?.textContent === %s`,
		js(fmt.Sprint(sent))))
	if got := eval[string](t, ctx, `document.querySelector('[data-tile="UNKNOWN keys"]').textContent`); got != "6" {
		t.Fatalf("the overview shows %s UNKNOWN keys; want 6", got)
	}
	screenshot(t, ctx, "overview")

	run(t, ctx, "the queue", chromedp.Click(chromedp.CSS(`nav a[data-view="queue"]`)),
		chromedp.WaitVisible(chromedp.CSS("#queue-table tbody tr")))
	listed := eval[[][2]string](t, ctx, `[...document.querySelectorAll('#queue-table tbody tr')].map((r) => [r.dataset.tenant, r.dataset.key])`)
	slices.SortFunc(listed, func(a, b [2]string) int { return strings.Compare(a[0]+"/"+a[1], b[0]+"/"+b[1]) })
	if !slices.Equal(listed, unknown) {
		t.Fatalf("the queue lists %v; want the keys of the cut requests %v", listed, unknown)
	}
	screenshot(t, ctx, "queue")

	// Resolve order-1001 as completed: the charge happened, here is its answer.
	openFromQueue(t, ctx, "acme", "order-1001")
	if state := eval[string](t, ctx, `document.getElementById('record-state').textContent`); state != "UNKNOWN" {
		t.Fatalf("order-1001 is %s on its page; want UNKNOWN", state)
	}
	screenshot(t, ctx, "key")
	const manual = `{"id":"ch_manual_1001","amount":100}`
	run(t, ctx, "filling the resolution",
		chromedp.SetValue(chromedp.CSS("#resolve-status"), "201"),
		chromedp.SetValue(chromedp.CSS("#resolve-headers"), "Content-Type: application/json\nRequest-Id: req_manual"),
		chromedp.SetValue(chromedp.CSS("#resolve-body"), manual),
		chromedp.Click(chromedp.CSS("#action-completed")))
	if res := confirm(t, ctx, "confirm"); !strings.HasPrefix(res, "result ok") {
		t.Fatalf("resolving order-1001 as completed: %s", res)
	}
	until(t, ctx, "the stored response on the page", fmt.Sprintf(
		`document.getElementById('record-state')?.textContent === 'COMPLETED' && document.getElementById('response-body')?.textContent === %s`, js(manual)))
	screenshot(t, ctx, "result")
	status, replayed, body := h.charge(t, "acme", "order-1001", `{"amount":100}`)
	if status != http.StatusCreated || !replayed || body != manual || h.up.charges("acme", "order-1001") != 1 {
		t.Fatalf("retry of order-1001 after the resolution = %d replayed=%v %s, %d charges; want the operator's 201 replayed, 1 charge",
			status, replayed, body, h.up.charges("acme", "order-1001"))
	}

	// Resolve order-1002 as not executed: the next retry runs it.
	h.openKey(t, ctx, "acme", "order-1002")
	run(t, ctx, "resolving as not executed", chromedp.Click(chromedp.CSS("#action-not-executed")))
	if res := confirm(t, ctx, ""); !strings.HasPrefix(res, "result ok") {
		t.Fatalf("resolving order-1002 as not executed: %s", res)
	}
	run(t, ctx, "the key released", chromedp.WaitVisible(chromedp.CSS("#no-record")))
	status, replayed, body = h.charge(t, "acme", "order-1002", `{"amount":100}`)
	if status != http.StatusCreated || replayed || !strings.Contains(body, `"run":2`) || h.up.charges("acme", "order-1002") != 2 {
		t.Fatalf("retry of order-1002 after not_executed = %d replayed=%v %s; want it run by the upstream (2nd charge)", status, replayed, body)
	}

	// Reconcile inv-7 now: the upstream's lookup finds its charge.
	h.openKey(t, ctx, "globex", "inv-7")
	run(t, ctx, "reconciling", chromedp.Click(chromedp.CSS("#action-reconcile")))
	if res := confirm(t, ctx, ""); !strings.HasPrefix(res, "result ok") || !strings.Contains(res, "Verdict: completed") {
		t.Fatalf("reconciling inv-7: %s", res)
	}
	status, replayed, body = h.charge(t, "globex", "inv-7", `{"amount":100}`)
	if status != http.StatusCreated || !replayed || !strings.Contains(body, "found_by") || h.up.charges("globex", "inv-7") != 1 {
		t.Fatalf("retry of inv-7 after the reconciliation = %d replayed=%v %s; want the lookup's answer replayed", status, replayed, body)
	}

	// Delete inv-8: the admin API refuses to delete an UNKNOWN key unless
	// forced, and the console offers to force it.
	h.openKey(t, ctx, "globex", "inv-8")
	run(t, ctx, "deleting", chromedp.Click(chromedp.CSS("#action-delete")))
	if res := confirm(t, ctx, ""); !strings.HasPrefix(res, "result failed") || !strings.Contains(res, "key_unknown") {
		t.Fatalf("deleting the UNKNOWN inv-8: %s; want it refused (409 key_unknown)", res)
	}
	run(t, ctx, "forcing", chromedp.Click(chromedp.CSS("#force-delete")))
	if res := confirm(t, ctx, ""); !strings.HasPrefix(res, "result ok") {
		t.Fatalf("force-deleting inv-8: %s", res)
	}
	run(t, ctx, "the key deleted", chromedp.WaitVisible(chromedp.CSS("#no-record")))

	run(t, ctx, "the queue again", chromedp.Click(chromedp.CSS(`nav a[data-view="queue"]`)))
	until(t, ctx, "the queue without the settled keys", `document.querySelectorAll('#queue-table tbody tr').length === 2`)
}

// openKey opens a key's page by the navigation's form.
func (h *harness) openKey(t *testing.T, ctx context.Context, tenant, key string) {
	t.Helper()
	run(t, ctx, "opening "+key,
		chromedp.SetValue(chromedp.CSS("#goto-tenant"), tenant),
		chromedp.SetValue(chromedp.CSS("#goto-key"), key),
		chromedp.Click(chromedp.CSS("#goto button")))
	until(t, ctx, "the page of "+key, fmt.Sprintf(`document.getElementById('record-key')?.textContent === %s && !!document.getElementById('actions')`, js(key)))
}

// traffic sends requests in rounds, each one sampled before the next, so
// that the overview has something to draw: new charges, replays, a
// conflict (a retry while the first is running) and key reuse with
// another body.
func (h *harness) traffic(t *testing.T) {
	t.Helper()
	for round := range 10 {
		for i := range 3 + round%4 {
			tenant := []string{"acme", "globex"}[i%2]
			key := fmt.Sprintf("pay-%d-%d", round, i)
			h.charge(t, tenant, key, `{"amount":250}`)
			if i < round%3 {
				if _, replayed, _ := h.charge(t, tenant, key, `{"amount":250}`); !replayed {
					t.Fatalf("a retry of %s was not replayed", key)
				}
			}
		}
		if round%4 == 3 {
			if status, _, _ := h.charge(t, "acme", fmt.Sprintf("pay-%d-0", round), `{"amount":999}`); status != http.StatusUnprocessableEntity {
				t.Fatalf("key reuse with another body = %d; want 422", status)
			}
		}
		if round == 5 {
			h.conflict(t, "globex", "slow-1")
		}
		h.waitSampled(t)
	}
}

// conflict sends a request the upstream holds, and while it runs a
// retry of it, which gets 409.
func (h *harness) conflict(t *testing.T, tenant, key string) {
	t.Helper()
	release := make(chan struct{})
	h.up.mu.Lock()
	h.up.hold[key] = release
	h.up.mu.Unlock()
	first := make(chan int, 1)
	go func() {
		status, _, _, err := h.send(tenant, key, `{"amount":5}`)
		if err != nil {
			status = 0
		}
		first <- status
	}()
	<-h.up.held
	if status, _, _ := h.charge(t, tenant, key, `{"amount":5}`); status != http.StatusConflict {
		t.Errorf("a retry while the first runs = %d; want 409", status)
	}
	close(release)
	if status := <-first; status != http.StatusCreated {
		t.Fatalf("the held request = %d; want 201", status)
	}
}
