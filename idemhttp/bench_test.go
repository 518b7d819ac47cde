package idemhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
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
				mw, err := idemhttp.New(e, nil)
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
// none), each batch after an untimed batch of as many to bare, and reports
// the ratio of their times.
func benchPair(b *testing.B, bare, h http.Handler, key func(int64) string) {
	const batch, clients = 200, 4
	bareSrv, srv := httptest.NewServer(bare), httptest.NewServer(h)
	defer bareSrv.Close()
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	const body = `{"amount":100,"currency":"EUR"}`
	send := func(url string, k string) {
		req, _ := http.NewRequest("POST", url+"/pay", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if k != "" {
			req.Header.Set(idemhttp.HeaderKey, k)
		}
		res, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			b.Errorf("status %d", res.StatusCode)
		}
	}
	var seq atomic.Int64
	run := func(url string, n int, key func(int64) string) time.Duration {
		start := time.Now()
		var left atomic.Int64
		left.Store(int64(n))
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					k := ""
					if key != nil {
						k = key(seq.Add(1))
					}
					send(url, k)
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	if key != nil {
		send(srv.URL, key(0)) // the replay's first execution, alone
	}
	run(bareSrv.URL, clients, nil) // warm connections
	run(srv.URL, clients, key)
	var bareTime, time time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		n := min(batch, b.N-done)
		b.StopTimer()
		bareTime += run(bareSrv.URL, n, nil)
		b.StartTimer()
		time += run(srv.URL, n, key)
	}
	b.StopTimer()
	b.ReportMetric(float64(bareTime)/float64(time), "x-bare")
}
