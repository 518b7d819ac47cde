package browsertest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemkit/idem"
)

// rows returns the tenant and key of each row of the queue's table.
func rows(t *testing.T, ctx context.Context) [][2]string {
	t.Helper()
	return eval[[][2]string](t, ctx, `[...document.querySelectorAll('#queue-table tbody tr')].map((r) => [r.dataset.tenant, r.dataset.key])`)
}

// The queue pages through more UNKNOWN keys than one call lists, with the
// list API's cursor, forward and back, and filters them by tenant and age.
func TestConsolePagesThroughTheQueue(t *testing.T) {
	h := newHarness(t)
	// The bulk is made through the engine, as a cut connection would make
	// it (230 cut connections would only be slower); one is cut for real.
	const bulk = 230
	for i := range bulk {
		ctx := context.Background()
		a, err := h.g.Engine().Begin(ctx, idem.Request{Tenant: "bulk", Key: fmt.Sprintf("b-%03d", i), Fingerprint: "fp"})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Lease.MarkUnknown(ctx, "the request was sent upstream and no complete response came back"); err != nil {
			t.Fatal(err)
		}
	}
	h.cutCharge(t, "other", "o-1", true)
	ctx := newTab(t)
	h.startAdmin(t)
	signIn(t, ctx, h.admin)

	run(t, ctx, "the queue of tenant bulk", chromedp.Navigate(h.admin+"/ui/#/queue?tenant=bulk"),
		chromedp.WaitVisible(chromedp.CSS("#queue-next")))
	seen := map[string]bool{}
	var pages [][][2]string
	for {
		page := rows(t, ctx)
		pages = append(pages, page)
		for _, r := range page {
			if r[0] != "bulk" || seen[r[1]] {
				t.Fatalf("page %d lists %v: another tenant, or a key seen before", len(pages), r)
			}
			seen[r[1]] = true
		}
		if !eval[bool](t, ctx, `!!document.getElementById('queue-next')`) {
			break
		}
		first := page[0][1]
		run(t, ctx, "the next page", chromedp.Click(chromedp.CSS("#queue-next")))
		until(t, ctx, "the next page's rows", fmt.Sprintf(`((row) => !!row && row.dataset.key !== %s)(document.querySelector('#queue-table tbody tr'))`, js(first)))
	}
	if len(pages) != 3 || len(pages[0]) != 100 || len(pages[1]) != 100 || len(seen) != bulk {
		t.Fatalf("%d pages of %d, %d keys in all; want pages of 100, 100 and 30: all %d keys once", len(pages), len(pages[0]), len(seen), bulk)
	}
	run(t, ctx, "the previous page", chromedp.Click(chromedp.CSS(".pager button")))
	until(t, ctx, "the second page again", fmt.Sprintf(`document.querySelector('#queue-table tbody tr')?.dataset.key === %s`, js(pages[1][0][1])))

	run(t, ctx, "filtering by tenant",
		chromedp.SetValue(chromedp.CSS("#queue-tenant"), "other"),
		chromedp.Click(chromedp.CSS("#queue-filter button")))
	until(t, ctx, "tenant other's keys", `document.querySelectorAll('#queue-table tbody tr').length === 1`)
	if got := rows(t, ctx); got[0] != [2]string{"other", "o-1"} {
		t.Fatalf("tenant other's queue = %v; want its cut key o-1", got)
	}

	eval[bool](t, ctx, `(() => { // every tenant, older than 12 hours (chromedp's SetValue cannot set "")
		document.getElementById('queue-tenant').value = '';
		document.getElementById('queue-age').value = '43200';
		document.querySelector('#queue-filter button').click();
		return true;
	})()`)
	until(t, ctx, "no key older than 12 hours", `!!document.querySelector('#queue-summary')?.textContent.includes('skipped')`)
	summary := eval[string](t, ctx, `document.getElementById('queue-summary').textContent`)
	if len(rows(t, ctx)) != 0 || !strings.Contains(summary, fmt.Sprintf("(%d others skipped by the filters)", bulk+1)) {
		t.Fatalf("keys older than 12 hours: %q, %d rows; want none, all %d skipped", summary, len(rows(t, ctx)), bulk+1)
	}
}
