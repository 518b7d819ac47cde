// Command gateway measures `idem serve` on loopback against the two peers
// a team would compare it with, each in a process of its own as a
// deployment runs them: a bare Go reverse proxy whose transport pools
// connections as the gateway's does (the floor every Go gateway pays for
// the extra hop), and the naive `SET NX EX` gateway they would write
// instead (naive.go). The upstream is a process of its own too; the load
// generator is this one. `idem serve` is built from the tree with
// `go build`; the peers are this program again, started with -role.
//
// Every row takes its turn in each round, at each client count, so a
// change of load on a shared machine falls on every row alike, in an
// order that turns by one row from round to round, so that no row always
// runs first or after the same one; the tables give per-round figures'
// medians and ratios computed within each round.
// Linux only: the CPU per request is read from /proc/<pid>/stat.
//
//	go run ./bench/gateway -clients 1,32,128 -duration 1s -rounds 3 -redis redis://127.0.0.1:6379/0
//	go run ./bench/gateway -baseline main   # idem serve built at main too: before and after in one run
//	go run ./bench/gateway -binary /tmp/idem-variant   # and a variant built elsewhere
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
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

// stringList is a flag that may be given more than once (-store, -binary).
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	role := flag.String("role", "", "run as a peer instead of the benchmark: upstream, bare or naive (the benchmark starts them)")
	upstreamFlag := flag.String("upstream", "", "with -role bare or naive: the upstream's URL")
	duration := flag.Duration("duration", time.Second, "load per row, client count and round")
	clientsFlag := flag.String("clients", "1,32,128", "comma-separated client counts")
	redisURI := flag.String("redis", "redis://127.0.0.1:6379/0", "Redis for the naive gateway and the default idem Redis row; empty skips them")
	rounds := flag.Int("rounds", 3, "rounds: the rows take turns in each")
	var stores stringList
	flag.Var(&stores, "store", "an `idem serve --store` URL to measure, a row each, optionally followed by more idem serve flags ('memory --log-level warn'); repeat it for more rows (default: memory and -redis)")
	baseline := flag.String("baseline", "", "a git revision: idem serve built at it gets a row per -store too, marked @REV (before and after a change in one run)")
	var variants stringList
	flag.Var(&variants, "binary", "an idem binary built elsewhere (a throwaway variant, to measure a lever's ceiling) gets a row per -store too, marked @ and its file name; repeat it for more")
	replays := flag.Bool("replays", false, "add replay rows (16 keys completed beforehand) for the naive gateway and each idem row")
	only := flag.String("only", "", "run only the rows whose name contains this (the bare proxy stays, as the baseline)")
	flag.Parse()
	if *role != "" {
		runPeer(*role, *upstreamFlag, *redisURI)
		return
	}
	if *rounds < 1 {
		log.Fatal("-rounds must be at least 1")
	}
	clients, err := counts.Parse(*clientsFlag, 1)
	if err != nil {
		log.Fatalf("-clients: %v", err)
	}
	for _, path := range variants {
		if _, err := os.Stat(path); err != nil {
			log.Fatalf("-binary: %v", err)
		}
	}
	if len(stores) == 0 {
		stores = stringList{"memory"}
		if *redisURI != "" {
			stores = append(stores, *redisURI)
		}
	}
	tmp, err := os.MkdirTemp("", "bench-gateway")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	binaries := []build{{"", filepath.Join(tmp, "idem")}}
	if err := goBuild(".", binaries[0].path); err != nil {
		log.Fatal(err)
	}
	if *baseline != "" {
		b, err := buildAt(*baseline, tmp)
		if err != nil {
			log.Fatal(err)
		}
		binaries = append(binaries, b)
	}
	for _, path := range variants {
		binaries = append(binaries, build{" @" + filepath.Base(path), path})
	}

	var peers []*peer
	defer func() {
		for _, p := range peers {
			p.stop()
		}
	}()
	start := func(p *peer, err error) *peer {
		if err != nil {
			log.Fatal(err)
		}
		peers = append(peers, p)
		return p
	}
	upstream := start(startPeer("upstream", ""))
	upURL := "http://" + upstream.addr
	type target struct {
		name   string
		p      *peer
		replay bool
	}
	targets := []target{{"bare Go reverse proxy (pooled)", start(startPeer("bare", upURL)), false}}
	run := rand.Text() // in every key this run sends
	var rdb *redis.Client
	if *redisURI != "" {
		opt, err := redis.ParseURL(*redisURI)
		if err != nil {
			log.Fatal(err)
		}
		rdb = redis.NewClient(opt) // INFO cpu, and forget at the end
		defer rdb.Close()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			log.Fatalf("redis: %v", err)
		}
		defer forget(rdb, run)
		naive := start(startPeer("naive", upURL, "-redis", *redisURI))
		targets = append(targets, target{"naive SET NX EX gateway (go-redis)", naive, false})
		if *replays {
			targets = append(targets, target{"naive SET NX EX gateway, replays", naive, true})
		}
	}
	for _, b := range binaries {
		for _, spec := range stores {
			uri, flags, _ := strings.Cut(spec, " ")
			name := "idem serve, " + rowName(uri) + b.rev
			if flags != "" {
				name += ", " + flags
			}
			if *only != "" && !strings.Contains(name, *only) {
				continue
			}
			g := start(startIdem(b.path, uri, strings.Fields(flags), upURL))
			targets = append(targets, target{name, g, false})
			if *replays {
				targets = append(targets, target{name + ", replays", g, true})
			}
		}
	}
	if *only != "" {
		targets = slices.DeleteFunc(targets, func(t target) bool { return t.p != targets[0].p && !strings.Contains(t.name, *only) })
	}

	// rows[c][i][round]
	rows := make([][][]result, len(clients))
	for c := range clients {
		rows[c] = make([][]result, len(targets))
	}
	for round := range *rounds {
		for c, n := range clients {
			// The order turns by one row each round: in a fixed order the
			// second of two identical idem rows ran 20% ahead of the first
			// at 1 client (issue 35), more than the levers it measures.
			for k := range targets {
				i := (k + round) % len(targets)
				tg := targets[i]
				gen, gw, up, srv := selfCPU(), tg.p.cpu(), upstream.cpu(), redisCPU(rdb)
				r := load("http://"+tg.p.addr, run, tg.replay, n, *duration)
				if done := time.Duration(r.rps * duration.Seconds()); done > 0 {
					r.genCPU = (selfCPU() - gen) / done
					r.gatewayCPU = (tg.p.cpu() - gw) / done
					r.upstreamCPU = (upstream.cpu() - up) / done
					r.redisCPU = (redisCPU(rdb) - srv) / done
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
		fmt.Printf("| path | req/s | x bare proxy | x naive | p50 | p99 | p50 added over bare | p99 added over bare | CPU µs per request: gateway, upstream, load generator, Redis | errors |\n|---|---|---|---|---|---|---|---|---|---|\n")
		bareRounds := rows[c][0]
		for i, tg := range targets {
			rs := rows[c][i]
			xNaive := "-"
			if naiveRow >= 0 {
				naiveRounds := rows[c][naiveRow]
				xNaive = fmt.Sprintf("%.2fx", medianOf(rs, func(k int, r result) float64 { return r.rps / naiveRounds[k].rps }))
			}
			var errs int64
			for _, r := range rs {
				errs += r.errors
			}
			if errs > 0 {
				erred = append(erred, fmt.Sprintf("%s at %d client(s): %d", tg.name, n, errs))
			}
			cpu := func(f func(result) time.Duration) string {
				return strconv.FormatInt(us(medianOf(rs, func(_ int, r result) float64 { return float64(f(r)) })).Microseconds(), 10)
			}
			fmt.Printf("| %s | %.0f | %.2fx | %s | %v | %v | %v | %v | %s, %s, %s, %s | %d |\n", tg.name,
				medianOf(rs, func(_ int, r result) float64 { return r.rps }),
				medianOf(rs, func(k int, r result) float64 { return r.rps / bareRounds[k].rps }),
				xNaive,
				us(medianOf(rs, func(_ int, r result) float64 { return float64(r.p50) })),
				us(medianOf(rs, func(_ int, r result) float64 { return float64(r.p99) })),
				us(medianOf(rs, func(k int, r result) float64 { return float64(r.p50 - bareRounds[k].p50) })),
				us(medianOf(rs, func(k int, r result) float64 { return float64(r.p99 - bareRounds[k].p99) })),
				cpu(func(r result) time.Duration { return r.gatewayCPU }),
				cpu(func(r result) time.Duration { return r.upstreamCPU }),
				cpu(func(r result) time.Duration { return r.genCPU }),
				cpu(func(r result) time.Duration { return r.redisCPU }),
				errs)
		}
	}
	fmt.Printf("\nMedians of %d rounds, %v per row per round (the rows take turns; ratios and added latencies are computed within each round), %d CPUs, %s; the load generator, each gateway, the upstream and Redis are processes of their own on the same machine.\n",
		*rounds, *duration, runtime.NumCPU(), loadAverage())
	if len(erred) > 0 {
		log.Fatalf("rows with requests not answered 201 (their throughput counts only the 201s, so it is not comparable):\n%s", strings.Join(erred, "\n"))
	}
}

// rowName names an idem row by its store URL, without the address.
func rowName(uri string) string {
	scheme, _, _ := strings.Cut(uri, ":")
	name := scheme + " store"
	if _, q, ok := strings.Cut(uri, "?"); ok {
		name += " (" + q + ")"
	}
	return name
}

// build is an idem binary: the tree's (rev "") or one built at a revision.
type build struct{ rev, path string }

// goBuild builds ./cmd/idem of the module in dir into out.
func goBuild(dir, out string) error {
	cmd := exec.Command("go", "build", "-o", out, "./cmd/idem")
	cmd.Dir, cmd.Stderr = dir, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building idem in %s: %w", dir, err)
	}
	return nil
}

// buildAt builds idem at the git revision rev: the tree at rev is
// extracted with git archive under tmp (the checkout is not touched).
func buildAt(rev, tmp string) (build, error) {
	dir := filepath.Join(tmp, "src")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return build{}, err
	}
	archive := exec.Command("git", "archive", rev)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return build{}, err
	}
	untar.Stdin, archive.Stderr, untar.Stderr = pipe, os.Stderr, os.Stderr
	if err := untar.Start(); err != nil {
		return build{}, err
	}
	if err := archive.Run(); err != nil {
		return build{}, fmt.Errorf("git archive %s: %w", rev, err)
	}
	if err := untar.Wait(); err != nil {
		return build{}, fmt.Errorf("extracting %s: %w", rev, err)
	}
	out := filepath.Join(tmp, "idem-baseline")
	return build{" @" + rev, out}, goBuild(dir, out)
}

// peer is a process the benchmark started and sends requests to.
type peer struct {
	cmd   *exec.Cmd
	addr  string
	ended chan error // Wait's answer
}

// startPeer starts this program again as role and reads the address it
// listens on from the first line of its standard output.
func startPeer(role, upstream string, args ...string) (*peer, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{"-role", role, "-upstream", upstream}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	return launch(cmd, out, func(line []byte) string {
		addr, _ := strings.CutPrefix(string(line), "listening ")
		return addr
	})
}

// startIdem starts `idem serve` on store in front of upstream, with flags,
// as a deployment does but on a port the kernel picks and logging JSON,
// and waits for its "idem: serving" line, which names the address. (A
// port found free beforehand is not reserved: idem serve's own admin
// listener, on another free port, could take it first.) Its log goes
// into a pipe this process drains, as it would into a log collector.
func startIdem(binary, store string, flags []string, upstream string) (*peer, error) {
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json",
		"--upstream", upstream, "--store", store}, flags...)
	if store == "memory" {
		// Every request is a new key kept for the retention, and one
		// tenant sends them all: the default bound (256 MiB, a quarter
		// of it a tenant's) fills in about 100,000 requests, and the rest
		// would be 503 store_full. A run takes a few hundred thousand.
		args = append(args, "--memory-limit", "4GiB", "--memory-tenant-share", "1")
	}
	cmd := exec.Command(binary, args...)
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p, err := start(cmd)
	if err != nil {
		return nil, err
	}
	serving := make(chan string, 1)
	var head bytes.Buffer // the log up to the serving line, shown if it never comes
	go func() {
		lines := bufio.NewScanner(out)
		lines.Buffer(nil, 1<<20)
		for lines.Scan() {
			var l struct{ Msg, Listen string }
			if json.Unmarshal(lines.Bytes(), &l) == nil && l.Msg == "idem: serving" {
				serving <- l.Listen
				break
			}
			if head.Len() < 64<<10 {
				head.Write(lines.Bytes())
				head.WriteByte('\n')
			}
		}
		close(serving)
		io.Copy(io.Discard, out)
	}()
	timeout := time.After(30 * time.Second)
	select {
	case addr, ok := <-serving:
		if ok {
			p.addr = addr
			return p, nil
		}
		// The log ended (or a line of it overran the scanner): the
		// process has ended, or is ended here.
		select {
		case err := <-p.ended:
			return nil, fmt.Errorf("idem serve --store %s ended before it served: %v\n%s", store, err, head.String())
		case <-timeout:
		}
	case <-timeout:
	}
	p.stop()
	<-serving // closed once the log has ended, which stop makes sure of
	return nil, fmt.Errorf("idem serve --store %s did not serve within 30s:\n%s", store, head.String())
}

// launch starts cmd and waits for the line of out in which addr finds the
// address it listens on; out is drained until the process ends.
func launch(cmd *exec.Cmd, out io.Reader, addr func([]byte) string) (*peer, error) {
	p, err := start(cmd)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if p.addr = addr(sc.Bytes()); p.addr != "" {
			break
		}
	}
	if p.addr == "" {
		p.stop()
		return nil, fmt.Errorf("%s ended before it served", cmd.Path)
	}
	go io.Copy(io.Discard, out)
	return p, nil
}

// start starts cmd, a peer that ends with this process.
func start(cmd *exec.Cmd) (*peer, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no orphan if this process dies
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &peer{cmd: cmd, ended: make(chan error, 1)}
	go func() { p.ended <- cmd.Wait() }()
	return p, nil
}

// stop ends p: SIGTERM, and SIGKILL if it has not ended 10 s later.
func (p *peer) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.ended:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.ended
	}
}

// clockTick is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on
// every Linux architecture Go runs on.
const clockTick = 10 * time.Millisecond

// cpu is the CPU time, user and system, p's process has used.
func (p *peer) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		log.Fatalf("reading a peer's CPU time: %v", err)
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields counted from 3 start after the last ')'.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64) // field 14
	stime, _ := strconv.ParseInt(fields[12], 10, 64) // field 15
	return time.Duration(utime+stime) * clockTick
}

// runPeer serves role until it is told to stop, after printing
// "listening ADDR" on standard output.
func runPeer(role, upstream, redisURI string) {
	var h http.Handler
	switch role {
	case "upstream":
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"id":"ch_1","status":"succeeded"}`))
		})
	case "bare", "naive":
		up, err := url.Parse(upstream)
		if err != nil || up.Host == "" {
			log.Fatalf("-role %s: -upstream %q: want the upstream's URL", role, upstream)
		}
		if role == "bare" {
			// The bare proxy pools upstream connections as the gateway
			// does: Go's http.DefaultTransport keeps 2 idle connections
			// per host, and under 32 clients it would dial for most
			// requests and flatter the gateway.
			proxy := httputil.NewSingleHostReverseProxy(up)
			proxy.Transport = gateway.NewUpstreamTransport()
			h = proxy
			break
		}
		opt, err := redis.ParseURL(redisURI)
		if err != nil {
			log.Fatalf("-role naive: -redis: %v", err)
		}
		opt.PoolSize = 1024 // as many connections as clients: a team sizes its pool for its load
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		h = newNaiveGateway(rdb, up, gateway.NewUpstreamTransport(), "naivebench:"+rand.Text()+":")
	default:
		log.Fatalf("-role %q: want upstream, bare or naive", role)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening %s\n", ln.Addr())
	srv := &http.Server{Handler: h}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
		<-sig
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
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

// result is what one row measured in one round.
type result struct {
	rps      float64
	p50, p99 time.Duration
	errors   int64
	// CPU time per request of each process: the row's gateway (or proxy),
	// the upstream, this load generator, and the Redis server (INFO cpu;
	// its other clients count too: measure on a quiet server).
	gatewayCPU, upstreamCPU, genCPU, redisCPU time.Duration
}

// selfCPU is the CPU time this process has used, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU time the Redis server has used (INFO cpu), or 0
// without one.
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

// load runs a closed loop of n clients for d, with keys that start with
// run. With replay, every request reuses one of a few keys completed
// beforehand.
func load(base, run string, replay bool, n int, d time.Duration) result {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}}
	defer client.CloseIdleConnections()
	run += "-" + rand.Text()[:8] // this load's own keys
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

// forget removes from Redis the keys this run made its peers write (their
// names hold the run's keys), so that runs in a row each start from the
// keyspace the first found: the records live for the retention (24 h), and
// three runs left two million keys (700 MB) that made the next run's
// scripts and SETs slower.
func forget(rdb *redis.Client, run string) {
	ctx := context.Background()
	var n int64
	var err error
	unlink := func(keys []string) {
		removed, uerr := rdb.Unlink(ctx, keys...).Result()
		n += removed
		err = cmp.Or(err, uerr)
	}
	iter := rdb.Scan(ctx, 0, "*"+run+"-*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			unlink(batch)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		unlink(batch)
	}
	if err = cmp.Or(iter.Err(), err); err != nil {
		log.Printf("removing this run's keys from Redis: %v (%d removed)", err, n)
		return
	}
	log.Printf("removed the %d keys this run wrote to Redis", n)
}
