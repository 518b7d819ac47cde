// Command gateway measures the idem gateway on loopback against the two
// peers a team would compare it with, in one run: a bare Go reverse proxy
// whose transport pools connections as the gateway's does (the floor every
// Go gateway pays for the extra hop), and the naive `SET NX EX` gateway
// they would write instead (naive.go). Every row takes its turn in each
// round, at each client count, so a change of load on a shared machine
// falls on every row alike; the tables give per-round figures' medians and
// ratios computed within each round.
//
//	go run ./bench/gateway -clients 1,32,128 -duration 1s -rounds 3 -redis redis://127.0.0.1:6379/0
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
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemkit/idem/bench/internal/counts"
	"github.com/idemkit/idem/internal/gateway"
	"github.com/redis/go-redis/v9"
)

func main() {
	duration := flag.Duration("duration", time.Second, "load per row, client count and round")
	clientsFlag := flag.String("clients", "1,32,128", "comma-separated client counts")
	concurrency := flag.Int("concurrency", 0, "one client count (overrides -clients)")
	redisURI := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis for the naive gateway and the redis rows; empty skips them")
	rounds := flag.Int("rounds", 3, "rounds: the rows take turns in each")
	coalesceOff := flag.Bool("coalesce-off", true, "add an idem redis row with ?coalesce=off")
	nearCache := flag.Bool("near-cache", false, "add an idem redis row with ?near_cache=on")
	replays := flag.Bool("replays", false, "add replay rows (16 keys completed beforehand) for the naive gateway and idem")
	only := flag.String("only", "", "run only the rows whose name contains this (the bare proxy stays, as the baseline)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the measured load to this file")
	flag.Parse()
	if *rounds < 1 {
		log.Fatal("-rounds must be at least 1")
	}
	clients, err := parseClients(*clientsFlag, *concurrency)
	if err != nil {
		log.Fatal(err)
	}

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"ch_1","status":"succeeded"}`))
	}))
	defer upstream.Close()
	upURL, _ := url.Parse(upstream.URL)
	// The bare proxy pools upstream connections as the gateway does: Go's
	// http.DefaultTransport keeps 2 idle connections per host, and under
	// 32 clients it would dial for most requests and flatter the gateway.
	bareProxy := httputil.NewSingleHostReverseProxy(upURL)
	bareProxy.Transport = gateway.NewUpstreamTransport()
	bare := httptest.NewServer(bareProxy)
	defer bare.Close()

	type target struct {
		name, base string
		replay     bool
	}
	targets := []target{{"bare Go reverse proxy (pooled)", bare.URL, false}}
	stores := []string{"memory"}
	var rdb *redis.Client
	if *redisURI != "" {
		opt, err := redis.ParseURL(*redisURI)
		if err != nil {
			log.Fatal(err)
		}
		opt.PoolSize = 1024 // as many connections as clients: a team sizes its pool for its load
		rdb = redis.NewClient(opt)
		defer rdb.Close()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			log.Fatalf("redis: %v", err)
		}
		naive := httptest.NewServer(newNaiveGateway(rdb, upURL, gateway.NewUpstreamTransport(), "naivebench:"+rand.Text()+":"))
		defer naive.Close()
		targets = append(targets, target{"naive SET NX EX gateway (go-redis)", naive.URL, false})
		if *replays {
			targets = append(targets, target{"naive SET NX EX gateway, replays", naive.URL, true})
		}
		sep := "?"
		if strings.Contains(*redisURI, "?") {
			sep = "&"
		}
		stores = append(stores, *redisURI) // coalesced, the default
		if *coalesceOff {
			stores = append(stores, *redisURI+sep+"coalesce=off")
		}
		if *nearCache {
			stores = append(stores, *redisURI+sep+"near_cache=on")
		}
	}
	for _, uri := range stores {
		addr, stop := startGateway(uri, upURL)
		defer stop()
		name := "idem serve, " + strings.SplitN(uri, ":", 2)[0] + " store"
		switch {
		case strings.Contains(uri, "coalesce=off"):
			name += " (coalesce=off)"
		case strings.Contains(uri, "near_cache=on"):
			name += " (near cache)"
		case strings.HasPrefix(uri, "redis"):
			name += " (coalesced, the default)"
		}
		targets = append(targets, target{name, "http://" + addr, false})
		if *replays {
			targets = append(targets, target{name + ", replays", "http://" + addr, true})
		}
	}

	if *only != "" {
		targets = slices.DeleteFunc(targets, func(t target) bool { return t.base != bare.URL && !strings.Contains(t.name, *only) })
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	// rows[c][i][round]
	rows := make([][][]result, len(clients))
	for c := range clients {
		rows[c] = make([][]result, len(targets))
	}
	for round := range *rounds {
		for c, n := range clients {
			for i, tg := range targets {
				proc, srv := processCPU(), redisCPU(rdb)
				r := load(tg.base, tg.replay, n, *duration)
				if done := r.rps * duration.Seconds(); done > 0 {
					r.cpu = (processCPU() - proc) / time.Duration(done)
					r.redisCPU = (redisCPU(rdb) - srv) / time.Duration(done)
				}
				rows[c][i] = append(rows[c][i], r)
			}
		}
		log.Printf("round %d of %d done (%s)", round+1, *rounds, loadAverage())
	}
	var erred []string // rows that answered anything but 201: their figures do not count
	naiveRow := slices.IndexFunc(targets, func(t target) bool { return strings.HasPrefix(t.name, "naive") })
	for c, n := range clients {
		fmt.Printf("\n%d client(s):\n\n", n)
		fmt.Printf("| path | req/s | x bare proxy | x naive | p50 | p99 | p50 added over bare | p99 added over bare | CPU per request: process, Redis | errors |\n|---|---|---|---|---|---|---|---|---|---|\n")
		bareRounds := rows[c][0]
		for i, tg := range targets {
			rs := rows[c][i]
			var naiveRounds []result
			if naiveRow >= 0 {
				naiveRounds = rows[c][naiveRow]
			}
			xNaive := "-"
			if naiveRounds != nil {
				xNaive = fmt.Sprintf("%.2fx", medianOf(rs, func(k int, r result) float64 { return r.rps / naiveRounds[k].rps }))
			}
			var errs int64
			for _, r := range rs {
				errs += r.errors
			}
			if errs > 0 {
				erred = append(erred, fmt.Sprintf("%s at %d client(s): %d", tg.name, n, errs))
			}
			fmt.Printf("| %s | %.0f | %.2fx | %s | %v | %v | %v | %v | %v, %v | %d |\n", tg.name,
				medianOf(rs, func(_ int, r result) float64 { return r.rps }),
				medianOf(rs, func(k int, r result) float64 { return r.rps / bareRounds[k].rps }),
				xNaive,
				us(medianOf(rs, func(_ int, r result) float64 { return float64(r.p50) })),
				us(medianOf(rs, func(_ int, r result) float64 { return float64(r.p99) })),
				us(medianOf(rs, func(k int, r result) float64 { return float64(r.p50 - bareRounds[k].p50) })),
				us(medianOf(rs, func(k int, r result) float64 { return float64(r.p99 - bareRounds[k].p99) })),
				us(medianOf(rs, func(_ int, r result) float64 { return float64(r.cpu) })),
				us(medianOf(rs, func(_ int, r result) float64 { return float64(r.redisCPU) })),
				errs)
		}
	}
	fmt.Printf("\nMedians of %d rounds, %v per row per round (the rows take turns; ratios and added latencies are computed within each round), GOMAXPROCS=%d, %s; load generator, peers, gateway, upstream and Redis share the machine.\n",
		*rounds, *duration, runtime.GOMAXPROCS(0), loadAverage())
	if len(erred) > 0 {
		log.Fatalf("rows with requests not answered 201 (their throughput counts only the 201s, so it is not comparable):\n%s", strings.Join(erred, "\n"))
	}
}

func parseClients(s string, one int) ([]int, error) {
	if one > 0 {
		return []int{one}, nil
	}
	out, err := counts.Parse(s, 1)
	if err != nil {
		return nil, fmt.Errorf("-clients: %w", err)
	}
	return out, nil
}

func medianOf(rs []result, f func(int, result) float64) float64 {
	vs := make([]float64, len(rs))
	for k, r := range rs {
		vs[k] = f(k, r)
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2]
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
}

func us(ns float64) time.Duration { return time.Duration(ns).Round(time.Microsecond) }

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load average unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}

func startGateway(uri string, upstream *url.URL) (string, func()) {
	var opts *gateway.StoreOptions
	if uri == "memory" {
		// Every request is a new key kept for the retention, and one tenant
		// sends them all: the default bound (256 MiB, a quarter of it a
		// tenant's) fills in about 100,000 requests, and the rest would be
		// 503 store_full. A run takes a few hundred thousand.
		opts = &gateway.StoreOptions{MemoryLimit: 4 << 30, MemoryTenantShare: 1}
	}
	store, closeStore, err := gateway.OpenStore(context.Background(), uri, opts)
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

// result is what one row measured in one round.
type result struct {
	rps      float64
	p50, p99 time.Duration
	errors   int64
	// cpu is this process's CPU time per request (the load generator, the
	// upstream and the row's gateway or proxy share it: the rows differ
	// only by the gateway); redisCPU the Redis server's.
	cpu, redisCPU time.Duration
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU time the Redis server has used (INFO cpu), or 0
// without one. Its other clients count too: measure on a quiet server.
func redisCPU(rdb *redis.Client) time.Duration {
	if rdb == nil {
		return 0
	}
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for line := range strings.SplitSeq(info, "\r\n") {
		name, v, _ := strings.Cut(line, ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// load runs a closed loop of n clients for d. With replay, every request
// reuses one of a few keys completed beforehand.
func load(base string, replay bool, n int, d time.Duration) result {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}}
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
	lat := make([][]time.Duration, n)
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				k := seq.Add(1)
				key := fmt.Sprintf("%s-%d", run, k)
				if replay {
					key = replayKeys[k%int64(len(replayKeys))]
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
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return result{errors: errs.Load()}
	}
	return result{rps: float64(len(all)) / d.Seconds(), p50: all[len(all)/2], p99: all[len(all)*99/100], errors: errs.Load()}
}
