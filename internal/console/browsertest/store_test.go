package browsertest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemkit/idem/internal/gateway"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// outage is the memory store whose reads fail while down is set, as a
// store that went away does: the admin API answers 503 store_unavailable.
type outage struct {
	*memstore.Store
	down atomic.Bool
}

var errOutage = errors.New("dial tcp 10.0.0.7:6379: connect: connection refused")

func (o *outage) Get(ctx context.Context, id store.ID) (store.Record, error) {
	if o.down.Load() {
		return store.Record{}, errOutage
	}
	return o.Store.Get(ctx, id)
}

func (o *outage) ListUnknown(ctx context.Context, p store.ListParams) (store.ListPage, error) {
	if o.down.Load() {
		return store.ListPage{}, errOutage
	}
	return o.Store.ListUnknown(ctx, p)
}

// Issue 36, item 4: a store outage is shown as such, apart from an admin
// API that does not answer: the overview says the store is unavailable,
// and the queue and a key's page say so with a Retry that shows the data
// once the store is back.
func TestConsoleSaysTheStoreIsUnavailable(t *testing.T) {
	var o *outage
	h := newHarness(t, func(cfg *gateway.Config) {
		o = &outage{Store: cfg.Store.(*memstore.Store)}
		cfg.Store = o
	})
	h.cutCharge(t, "acme", "order-9", false)
	ctx := newTab(t)
	h.startAdmin(t)
	signIn(t, ctx, h.admin)
	if eval[bool](t, ctx, `!!document.getElementById('store-down')`) {
		t.Fatal("the overview says the store is down while it answers")
	}

	o.down.Store(true)
	run(t, ctx, "the overview again", chromedp.Reload())
	until(t, ctx, "the overview saying the store is unavailable", `!!document.getElementById('store-down')`)
	if got := eval[string](t, ctx, `document.getElementById('store-down').textContent`); !strings.Contains(got, "The store is unavailable") ||
		!strings.Contains(got, "connection refused") || strings.Contains(got, "did not answer") {
		t.Fatalf("the overview of a gateway whose store is down says %q; want that the store is unavailable, and why", got)
	}
	screenshot(t, ctx, "store-down")
	for _, view := range []string{"#/queue?tenant=acme", "#/key?tenant=acme&key=order-9"} {
		run(t, ctx, view, chromedp.Navigate(h.admin+"/ui/"+view))
		until(t, ctx, view+" saying the store is unavailable", `document.getElementById('load-error')?.dataset.trouble === 'store'`)
		if got := eval[string](t, ctx, `document.getElementById('load-error').textContent`); !strings.Contains(got, "the store is unavailable") ||
			strings.Contains(got, "did not answer") {
			t.Fatalf("%s with the store down shows %q; want that the store is unavailable, not the admin API", view, got)
		}
	}
	o.down.Store(false)
	run(t, ctx, "retrying", chromedp.Click(chromedp.CSS("#retry")))
	until(t, ctx, "the key's page once the store is back", `document.getElementById('record-state')?.textContent === 'UNKNOWN'`)
}
