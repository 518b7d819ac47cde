package idem_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/store/memstore"
)

// TestDoNetworkErrorAfterSendIsUnknown: a work whose outbound call was
// sent and whose connection then broke returns the client's error as it
// is (a *url.Error, a net.Error): the call may have taken effect, so Do
// keeps the key UNKNOWN instead of releasing it, and the next Do does not
// run the work again. A work whose one call provably never left
// (idemclient.Sent false) says so with idem.NotRun, and the key is
// released.
func TestDoNetworkErrorAfterSendIsUnknown(t *testing.T) {
	var effects atomic.Int64
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		effects.Add(1) // the charge is made, then the answer is lost
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer provider.Close()
	s, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, s, nil)
	defer e.Shutdown(context.Background())
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	for _, tc := range []struct {
		name   string
		client *http.Client
	}{
		{"net/http", &http.Client{Transport: tr}},
		{"idemclient.Transport", &http.Client{Transport: &idemclient.Transport{Base: tr}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			effects.Store(0)
			runs := 0
			work := func(ctx context.Context, l *idem.Lease) ([]byte, error) {
				runs++
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL, strings.NewReader("charge"))
				resp, err := tc.client.Do(req)
				if err != nil {
					return nil, err // as it is, not marked
				}
				resp.Body.Close()
				return []byte("ok"), nil
			}
			req := idem.Request{Tenant: "t", Key: "net-" + tc.name, Fingerprint: "f"}
			_, _, err := e.Do(context.Background(), req, work)
			if !errors.Is(err, idem.ErrOutcomeUnknown) {
				t.Errorf("first Do: %v, want an unknown outcome", err)
			}
			_, _, err = e.Do(context.Background(), req, work)
			if runs != 1 || effects.Load() != 1 {
				t.Fatalf("the work ran %d times and charged %d times after a call that was sent (second Do: %v), want once", runs, effects.Load(), err)
			}
		})
	}
	t.Run("never sent", func(t *testing.T) {
		runs := 0
		work := func(ctx context.Context, l *idem.Lease) ([]byte, error) {
			runs++
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:1", strings.NewReader("charge"))
			resp, err := (&http.Client{Transport: &idemclient.Transport{Base: tr}}).Do(req)
			if err != nil && !idemclient.Sent(err) {
				return nil, idem.NotRun(err) // the work's one call never left
			}
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			return []byte("ok"), nil
		}
		req := idem.Request{Tenant: "t", Key: "net-refused", Fingerprint: "f"}
		e.Do(context.Background(), req, work)
		e.Do(context.Background(), req, work)
		if runs != 2 {
			t.Fatalf("the work ran %d times after a call that was never sent, want 2 (the key released)", runs)
		}
	})
}
