package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
)

// switchedStore is the memory store whose reads fail while down is set.
type switchedStore struct {
	*memstore.Store
	down atomic.Bool
}

func (s *switchedStore) Get(ctx context.Context, id store.ID) (store.Record, error) {
	if s.down.Load() {
		return store.Record{}, errors.New("ready test: the store is down")
	}
	return s.Store.Get(ctx, id)
}

// Issue 36, item 3: idem_ready says at each scrape what /readyz answers,
// so IdemNotReady sees a gateway whose store went away with nothing
// polling /readyz; it goes back to 1 when the store answers again.
func TestReadyGaugeFollowsReadyz(t *testing.T) {
	mem, _ := memstore.New(nil)
	s := &switchedStore{Store: mem}
	g := memoryGateway(t, s)
	readyz := func() int {
		rec := httptest.NewRecorder()
		g.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code
	}
	for _, down := range []bool{false, true, false} {
		s.down.Store(down)
		want, code := 1.0, http.StatusOK
		if down {
			want, code = 0, http.StatusServiceUnavailable
		}
		if got := readyz(); got != code {
			t.Fatalf("store down %v: /readyz = %d; want %d", down, got, code)
		}
		if got, ok := scrape(t, g)["idem_ready"]; !ok || got != want {
			t.Fatalf("store down %v: idem_ready = %v (present: %v); want %v", down, got, ok, want)
		}
	}
}

// Issue 36, item 4: /v1/stats, which the console's overview polls, says
// when the store does not answer, so the console can tell a store outage
// from an admin API that does not answer.
func TestStatsSayTheStoreIsUnavailable(t *testing.T) {
	mem, _ := memstore.New(nil)
	s := &switchedStore{Store: mem}
	g := adminGateway(t, Config{Store: s})
	for _, down := range []bool{false, true} {
		s.down.Store(down)
		code, body := admin(t, g, "GET", "/v1/stats", "")
		if said := strings.Contains(body, `"store_unavailable":"`) && strings.Contains(body, "the store is down"); code != 200 || said != down {
			t.Fatalf("store down %v: GET /v1/stats = %d %s; want 200, saying the store is unavailable: %v", down, code, body, down)
		}
	}
}
