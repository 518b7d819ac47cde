package gateway

import (
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store/memstore"
)

// BenchmarkHandler serves the gateway's handler on loopback, as idem serve
// does, in front of a hello-world upstream, and sends first requests
// (a unique key each) from 1 and from 32 clients, on the memory store and
// on Redis (coalesced, the default). ns/op and allocs/op are per request,
// the client's, the gateway's and the upstream's together; it is the
// benchmark the profiles in docs/benchmarks.md are taken on:
//
//	go test -run '^$' -bench 'Handler/redis/c32' -benchtime 20000x -cpuprofile /tmp/cpu.out ./internal/gateway/
func BenchmarkHandler(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"ch_1","status":"succeeded"}`))
	}))
	defer up.Close()
	for _, st := range []string{"memory", "redis"} {
		for _, clients := range []int{1, 32} {
			b.Run(st+"/c"+strconv.Itoa(clients), func(b *testing.B) {
				var srv *httptest.Server
				if st == "memory" {
					store, _ := memstore.New(nil)
					u, _ := url.Parse(up.URL)
					g, err := New(Config{Upstream: u, Store: store, Logger: slog.New(slog.DiscardHandler)})
					if err != nil {
						b.Fatal(err)
					}
					srv = httptest.NewServer(g.Handler())
					defer srv.Close()
				} else {
					_, srv = redisGateway(b, "coalesce=on", up.URL)
				}
				benchClients(b, srv.URL, clients)
			})
		}
	}
}

// benchClients sends b.N first requests from n clients in closed loops.
func benchClients(b *testing.B, base string, n int) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}}
	defer client.CloseIdleConnections()
	run := rand.Text()
	var seq atomic.Int64
	send := func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/charges", strings.NewReader(`{"amount":4200,"currency":"eur"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", run+strconv.FormatInt(seq.Add(1), 10))
		req.Header.Set("Authorization", "Bearer bench")
		resp, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Errorf("status %d", resp.StatusCode)
		}
	}
	send() // the connections and the scripts are ready before the clock starts
	b.ReportAllocs()
	gcBefore, cpuBefore := gcCPU(), testenv.ProcessCPU(b)
	b.ResetTimer()
	defer func() {
		// The collector's CPU, the whole process's, per request: what a
		// heap the collector scans costs, less noisy than ns/op on a
		// shared machine.
		b.ReportMetric((gcCPU()-gcBefore)*1e6/float64(b.N), "gc-µs/op")
		// The process's CPU per request (client, gateway and upstream; the
		// store server is another process): the cost a change to the
		// gateway or its store client moves, when ns/op is the machine's load.
		b.ReportMetric(float64(testenv.ProcessCPU(b)-cpuBefore)/1e3/float64(b.N), "cpu-µs/op")
	}()
	if n == 1 {
		for range b.N {
			send()
		}
		return
	}
	b.SetParallelism((n + 1) / 2) // GOMAXPROCS is 2 on the machines this is measured on
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			send()
		}
	})
}

// gcCPU returns the CPU seconds the collector has taken in this process
// (an estimate of the runtime's, updated at each cycle).
func gcCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64()
}
