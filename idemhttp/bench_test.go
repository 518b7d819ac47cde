package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testinfra/storekit"
	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/redisstore"
)

// BenchmarkMiddleware serves a hello-world handler over loopback HTTP,
// bare and behind the middleware on the in-memory store and on Redis, with
// a unique key per request (every request runs the handler) and with one
// key (every request is a replay).
//
// Each middleware case alternates batches of requests to the bare handler
// (untimed) and to the protected one (timed), so both see the same load on
// a shared machine, and reports x-bare: its requests per second as a
// fraction of the bare handler's (1.0 = no cost). ns/op and allocs/op are
// the protected requests', client and server together; the "bare" case
// gives them without the middleware.
func BenchmarkMiddleware(b *testing.B) {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello, world\n")
	})
	b.Run("bare", func(b *testing.B) { benchPair(b, hello, hello, nil) })
	stores := []struct {
		name string
		new  func(b *testing.B) store.Store
	}{
		{"memory", func(b *testing.B) store.Store {
			s, err := memstore.New(&memstore.Options{TenantShare: 1}) // every request is one tenant's
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"redis", func(b *testing.B) store.Store {
			s, err := redisstore.New(testenv.Redis(b), &redisstore.Options{Prefix: testenv.Prefix(b)})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	for _, st := range stores {
		for _, mode := range []string{"unique", "replay"} {
			b.Run(st.name+"/"+mode, func(b *testing.B) {
				e, err := idem.New(st.new(b), &idem.Options{Retention: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				mw, err := idemhttp.New(e, &idemhttp.Options{AllowAnonymous: true}) // the measured requests send no credentials
				if err != nil {
					b.Fatal(err)
				}
				key := func(i int64) string { return "k" + strconv.FormatInt(i, 10) }
				if mode == "replay" {
					key = func(int64) string { return "same" }
				}
				benchPair(b, hello, mw(hello), key)
			})
		}
	}
}

// benchPair sends b.N timed POSTs to h (with the keys key gives; nil sends
// none) and as many untimed to bare, batch by batch (storekit.Compare),
// and reports x-bare, the ratio of their times.
func benchPair(b *testing.B, bare, h http.Handler, key func(int64) string) {
	const batch, clients = 200, 4
	bareSrv, srv := httptest.NewServer(bare), httptest.NewServer(h)
	defer bareSrv.Close()
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	const body = `{"amount":100,"currency":"EUR"}`
	call := func(url string, key func(int64) string) storekit.Call {
		return func(_ context.Context, i int64) error {
			req, _ := http.NewRequest("POST", url+"/pay", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if key != nil {
				req.Header.Set(idemhttp.HeaderKey, key(i))
			}
			res, err := client.Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", res.StatusCode)
			}
			return nil
		}
	}
	protected, unprotected := call(srv.URL, key), call(bareSrv.URL, nil)
	if key != nil {
		if err := protected(context.Background(), -1); err != nil { // the replay's first execution, alone
			b.Fatal(err)
		}
	}
	var warm sync.WaitGroup // open the clients' connections
	for i := range clients {
		warm.Go(func() {
			unprotected(context.Background(), 0)
			protected(context.Background(), int64(-2-i))
		})
	}
	warm.Wait()
	b.ReportAllocs()
	storekit.Compare(b, storekit.Pace{Workers: clients, Chunk: batch}, protected,
		storekit.Baseline{Name: "bare", Ratio: "x-bare", Call: unprotected})
}
