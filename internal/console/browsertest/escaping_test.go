package browsertest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// dialogs records every JavaScript dialog (alert, confirm, prompt) the
// page opens, and dismisses it so that the page goes on.
type dialogs struct {
	mu   sync.Mutex
	seen []string
}

// watch starts recording; the returned stop ends it and waits.
func (d *dialogs) watch(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	events := chromedp.Events(ctx, page.JavascriptDialogOpening)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range events {
			if err != nil {
				return
			}
			d.mu.Lock()
			d.seen = append(d.seen, fmt.Sprintf("%s(%q)", ev.Type, ev.Message))
			d.mu.Unlock()
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{})
		}
	}()
	return func() { cancel(); <-done }
}

func (d *dialogs) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.seen)
}

// Keys, tenants, headers and bodies that are markup stay text: the queue,
// the key's page, the stored response and the confirmation show them as
// written, no dialog opens, no element is injected, and the page breaks
// no rule of its Content-Security-Policy.
func TestConsoleRendersHostileDataAsText(t *testing.T) {
	const (
		key    = `<img src=x onerror=alert(1)>`
		tenant = `<svg onload=alert(2)>`
		body   = `</script><script>alert(3)</script><img src=x onerror=alert(4)>`
		header = `<b onmouseover=alert(5)>req_1</b>`
	)
	h := newHarness(t)
	h.cutCharge(t, tenant, key, true)
	h.up.mu.Lock()
	h.up.answer[id(tenant, key+" done")] = http.Header{"Content-Type": {"text/html"}, "X-Request-Id": {header}}
	h.up.body[id(tenant, key+" done")] = body
	h.up.mu.Unlock()
	if status, _, got := h.charge(t, tenant, key+" done", `{}`); status != http.StatusCreated || got != body {
		t.Fatalf("the hostile answer = %d %q", status, got)
	}

	ctx := newTab(t)
	var d dialogs
	stop := d.watch(ctx)
	defer stop()
	h.startAdmin(t)
	signIn(t, ctx, h.admin)
	// The watchers can fail: a dialog opened from DevTools is seen, and an
	// image the policy forbids is reported. Then both start from nothing.
	eval[bool](t, ctx, `(() => {
		window.violations = [];
		document.addEventListener('securitypolicyviolation', (e) => window.violations.push(e.violatedDirective + ' ' + e.blockedURI));
		setTimeout(() => alert('probe'), 0);
		const probe = document.createElement('img');
		probe.src = 'data:image/gif;base64,R0lGODlhAQABAAAAACw=';
		document.body.append(probe);
		probe.remove();
		return true;
	})()`)
	until(t, ctx, "the probe's violation", `window.violations.length > 0`)
	if n := d.count(); n != 1 {
		t.Fatalf("%d dialogs seen after the probe's alert; want 1: the watch does not work", n)
	}
	eval[bool](t, ctx, `(window.violations = [], true)`)

	run(t, ctx, "the queue", chromedp.Click(chromedp.CSS(`nav a[data-view="queue"]`)),
		chromedp.WaitVisible(chromedp.CSS("#queue-table tbody tr")))
	cells := eval[[]string](t, ctx, `[...document.querySelectorAll('#queue-table tbody tr td')].slice(0, 2).map((td) => td.textContent)`)
	if len(cells) != 2 || cells[0] != tenant || cells[1] != key {
		t.Fatalf("the queue's row shows %q; want the tenant %q and the key %q as text", cells, tenant, key)
	}
	openFromQueue(t, ctx, tenant, key)
	if got := eval[string](t, ctx, `document.querySelector('#record td').textContent`); got != tenant {
		t.Fatalf("the key's page shows the tenant %q; want %q", got, tenant)
	}
	run(t, ctx, "a confirmation naming the key", chromedp.Click(chromedp.CSS("#action-delete")),
		chromedp.WaitVisible(chromedp.CSS("#confirm[open]")))
	if got := eval[string](t, ctx, `document.getElementById('confirm-body').textContent`); !strings.Contains(got, key) || !strings.Contains(got, tenant) {
		t.Fatalf("the confirmation says %q; want the key and tenant as text", got)
	}
	run(t, ctx, "cancelling", chromedp.Click(chromedp.CSS("#confirm-cancel")), chromedp.WaitNotPresent(chromedp.CSS("#confirm[open]")), painted)

	h.openKey(t, ctx, tenant, key+" done")
	until(t, ctx, "the stored response", fmt.Sprintf(`document.getElementById('response-body')?.textContent === %s`, js(body)))
	if got := eval[string](t, ctx, `document.querySelector('#response table.headers').textContent`); !strings.Contains(got, "X-Request-Id"+header) {
		t.Fatalf("the stored headers show %q; want %q as text", got, header)
	}
	screenshot(t, ctx, "escaping")
	if got := eval[bool](t, ctx, `document.querySelectorAll('#response-body *').length === 0`); !got {
		t.Fatal("the stored body's <pre> holds elements; want only its text")
	}
	run(t, ctx, "the overview", chromedp.Click(chromedp.CSS(`nav a[data-view="overview"]`)))
	until(t, ctx, "the overview's charts", `document.querySelectorAll('.charts figure svg').length === 4`)

	injected := eval[[]string](t, ctx, `[...document.querySelectorAll('*')].filter((e) =>
		['img', 'iframe', 'object', 'embed'].includes(e.localName) ||
		e.localName === 'script' && e.getAttribute('src') !== 'js/main.js' ||
		e.localName === 'svg' && !e.classList.contains('plot') ||
		e.children.length === 0 && e.textContent === 'req_1' ||
		[...e.attributes].some((a) => a.name.startsWith('on'))).map((e) => e.outerHTML.slice(0, 80))`)
	if len(injected) != 0 {
		t.Fatalf("elements injected from data: %q", injected)
	}
	if v := eval[[]string](t, ctx, `window.violations`); len(v) != 0 {
		t.Fatalf("the page broke its Content-Security-Policy: %q", v)
	}
	if n := d.count(); n != 1 {
		d.mu.Lock()
		t.Fatalf("dialogs opened by the page: %q", d.seen[1:])
	}
}
