// Command gateway measures the idem gateway on loopback, in one run: the
// upstream called directly, through a bare Go reverse proxy (the floor every
// Go gateway pays for the extra hop), and through the idem gateway on the
// memory store and on Redis, with unique keys and with replays. It prints a
// Markdown table of req/s, p50 and p99, and ratios against the bare proxy.
//
//	go run ./bench/gateway -duration 5s -concurrency 32 -redis redis://127.0.0.1:6379/0
//
// With -near-cache (the default) the Redis rows are run again with
// ?near_cache=on; with -coalesce (the default) again with ?coalesce=on,
// and, with both flags, with ?coalesce=on&near_cache=on.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/gateway"
)

func main() {
	duration := flag.Duration("duration", 5*time.Second, "load per configuration")
	concurrency := flag.Int("concurrency", 32, "concurrent clients")
	redisURI := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis for the redis rows; empty skips them")
	rounds := flag.Int("rounds", 5, "rounds: the rows take turns, duration/rounds each per round")
	nearCache := flag.Bool("near-cache", true, "add redis rows with ?near_cache=on (replays from process memory)")
	coalesce := flag.Bool("coalesce", true, "add redis rows with ?coalesce=on, the gateway's default (scripts in flight at once go out as one batch)")
	flag.Parse()
	if *rounds < 1 {
		log.Fatal("-rounds must be at least 1")
	}

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"ch_1","status":"succeeded"}`))
	}))
	defer upstream.Close()
	upURL, _ := url.Parse(upstream.URL)
	// Two baselines: the reverse proxy as Go ships it (the floor the issue
	// names), and the same proxy with the gateway's connection and buffer
	// pools, which isolates the cost of idempotency alone.
	bareProxy := httputil.NewSingleHostReverseProxy(upURL)
	bareProxy.Transport = gateway.NewUpstreamTransport() // Go's 2 idle connections per host would measure dialling
	pooledProxy := httputil.NewSingleHostReverseProxy(upURL)
	pooledProxy.Transport = gateway.NewUpstreamTransport()
	pooledProxy.BufferPool = gateway.CopyBuffers{}
	pooled := httptest.NewServer(pooledProxy)
	defer pooled.Close()
	bare := httptest.NewServer(bareProxy)
	defer bare.Close()

	type target struct {
		name, base string
		replay     bool
	}
	targets := []target{{"upstream direct", upstream.URL, false}, {"bare Go reverse proxy", bare.URL, false},
		{"bare Go reverse proxy, pooled buffers", pooled.URL, false}}
	stores := []string{"memory"}
	if *redisURI != "" {
		sep := "?"
		if strings.Contains(*redisURI, "?") {
			sep = "&"
		}
		// The gateway coalesces by default: the plain rows say coalesce=off.
		stores = append(stores, *redisURI+sep+"coalesce=off")
		if *nearCache {
			stores = append(stores, *redisURI+sep+"coalesce=off&near_cache=on")
		}
		if *coalesce {
			stores = append(stores, *redisURI+sep+"coalesce=on")
		}
		if *nearCache && *coalesce {
			stores = append(stores, *redisURI+sep+"coalesce=on&near_cache=on")
		}
	}
	for _, uri := range stores {
		addr, stop := startGateway(uri, upURL)
		defer stop()
		name := "idem, " + strings.SplitN(uri, ":", 2)[0] + " store"
		switch near, co := strings.Contains(uri, "near_cache=on"), strings.Contains(uri, "coalesce=on"); {
		case near && co:
			name += " (coalesce, near cache)"
		case near:
			name += " (near cache)"
		case co:
			name += " (coalesce)"
		}
		targets = append(targets, target{name + ", unique keys", "http://" + addr, false}, target{name + ", replays", "http://" + addr, true})
	}

	// The rows take turns, duration/rounds each per round, so a change of
	// load on a shared machine falls on every row alike.
	samples := make([]sample, len(targets))
	for round := range *rounds {
		for i, tg := range targets {
			samples[i].add(load(tg.base, tg.replay, *concurrency, *duration/time.Duration(*rounds)))
		}
		log.Printf("round %d of %d done", round+1, *rounds)
	}
	results := make([]result, len(targets))
	for i, tg := range targets {
		results[i] = samples[i].result(*duration)
		log.Printf("%s: %.0f req/s", tg.name, results[i].rps)
	}
	baseline, pooledBase := results[1], results[2]
	fmt.Printf("| path | req/s | vs direct | vs bare proxy | vs pooled proxy | p50 | p99 | p99 added over bare proxy | errors |\n|---|---|---|---|---|---|---|---|---|\n")
	for i, tg := range targets {
		r := results[i]
		fmt.Printf("| %s | %.0f | %.2fx | %.2fx | %.2fx | %v | %v | %v | %d |\n", tg.name, r.rps, r.rps/results[0].rps, r.rps/baseline.rps,
			r.rps/pooledBase.rps, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), (r.p99 - baseline.p99).Round(time.Microsecond), r.errors)
	}
	fmt.Printf("\n%d clients, %v per row in %d rounds (the rows take turns), GOMAXPROCS=%d; load generator, proxies and upstream share the machine.\n",
		*concurrency, *duration, *rounds, runtimeProcs())
}

func startGateway(uri string, upstream *url.URL) (string, func()) {
	store, closeStore, err := gateway.OpenStore(context.Background(), uri, nil)
	if err != nil {
		log.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Listen: "127.0.0.1:0", Upstream: upstream, Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Run(ctx, func(proxy, _ net.Addr) { addrs <- proxy.String() }); err != nil {
			log.Fatal(err)
		}
	}()
	return <-addrs, func() { cancel(); <-done; closeStore() }
}

type result struct {
	rps      float64
	p50, p99 time.Duration
	errors   int64
}

// sample is what the rounds of one row measured.
type sample struct {
	lat    []time.Duration // of the requests that succeeded
	errors int64
}

func (s *sample) add(o sample) { s.lat, s.errors = append(s.lat, o.lat...), s.errors+o.errors }

// result summarises the sample of requests made in d.
func (s *sample) result(d time.Duration) result {
	slices.Sort(s.lat)
	if len(s.lat) == 0 {
		return result{errors: s.errors}
	}
	return result{rps: float64(len(s.lat)) / d.Seconds(), p50: s.lat[len(s.lat)/2], p99: s.lat[len(s.lat)*99/100], errors: s.errors}
}

// load runs a closed loop of concurrent clients for d. With replay, every
// request reuses one of a few keys completed beforehand.
func load(base string, replay bool, concurrency int, d time.Duration) sample {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency, MaxConnsPerHost: concurrency}}
	defer client.CloseIdleConnections()
	run := rand.Text()
	send := func(key string) (time.Duration, bool) {
		req, _ := http.NewRequest(http.MethodPost, base+"/charges", strings.NewReader(`{"amount":4200,"currency":"eur"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer bench-client") // the gateway refuses anonymous clients
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(start), resp.StatusCode == http.StatusCreated
	}
	replayKeys := make([]string, 16)
	for i := range replayKeys {
		replayKeys[i] = fmt.Sprintf("%s-replay-%d", run, i)
		if replay {
			send(replayKeys[i])
		}
	}
	var seq, errs atomic.Int64
	lat := make([][]time.Duration, concurrency)
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range concurrency {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				n := seq.Add(1)
				key := fmt.Sprintf("%s-%d", run, n)
				if replay {
					key = replayKeys[n%int64(len(replayKeys))]
				}
				took, ok := send(key)
				if !ok {
					errs.Add(1)
					continue
				}
				lat[w] = append(lat[w], took)
			}
		})
	}
	wg.Wait()
	return sample{lat: slices.Concat(lat...), errors: errs.Load()}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
