// Command curve draws idem's cost curve: cycles per second of one request
// that does the work (acquire, then store the response) as concurrency
// and the number of stored records grow, for the naive Redis lock of the
// article (SET NX EX + SET, on go-redis and on rueidis), a
// bsm/redislock-style lock (SET NX PX, SET, compare-and-delete release)
// and idem's engine on the memory store, the Redis store (go-redis and
// rueidis) and the PostgreSQL store.
//
//	go run ./bench/curve -out docs/curve
//
// Every point runs each implementation for -duration, split in -rounds
// rounds whose order alternates, and reports its cycles per second and
// the ratio to the naive lock at the same point. A point starts from the
// same stored records: what its runs wrote is deleted after each run.
// Redis is a redis-server the command starts on a free port and stops at
// the end (one database per backend); PostgreSQL is a schema of its own,
// dropped at the end.
//
// It writes, under -out: curve.csv (every point) and curve.md (its
// tables of cycles/s and ratios), memory.csv and
// memory.md (bytes per stored record), concurrency.svg (cycles/s against
// concurrency, with no stored records) and keys.svg (cycles/s against
// stored records, at -at goroutines). -render redraws the charts and the
// table from the CSV files without measuring.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/bench/internal/counts"
	"github.com/idemkit/idem/internal/redisproc"
)

// config is what the flags say.
type config struct {
	out         string
	duration    time.Duration
	rounds      int
	concurrency []int
	keys        []int64
	at          int
	only        []string
	postgres    string
}

func main() {
	var c config
	var conc, keys, only string
	var tenMillion, render bool
	flag.StringVar(&c.out, "out", "docs/curve", "directory of the CSV files and charts")
	flag.DurationVar(&c.duration, "duration", 2*time.Second, "time per implementation per point")
	flag.IntVar(&c.rounds, "rounds", 4, "rounds each point's time is split in, the implementations' order reversed every other round")
	flag.StringVar(&conc, "concurrency", "1,2,4,8,16,32,64,128,256", "goroutines of the concurrency sweep")
	flag.StringVar(&keys, "keys", "0,10000,100000,1000000", "stored records of the keys sweep, ascending")
	flag.BoolVar(&tenMillion, "10m", false, "add 10,000,000 stored records to the keys sweep: about 8 GB of Redis memory, a 9 GB Go heap and 3.5 GB of PostgreSQL with every implementation (narrow with -only)")
	flag.IntVar(&c.at, "at", 64, "goroutines of the keys sweep")
	flag.StringVar(&only, "only", "", "comma-separated implementations to run (default all; naive always runs)")
	flag.StringVar(&c.postgres, "postgres", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL for idem-postgres; empty skips it")
	flag.BoolVar(&render, "render", false, "only redraw the charts and the memory table from the CSV files in -out")
	flag.Parse()

	if render {
		if err := renderAll(c.out); err != nil {
			log.Fatal(err)
		}
		return
	}
	var err error
	if c.concurrency, err = counts.Parse(conc, 0); err != nil {
		log.Fatalf("-concurrency: %v", err)
	}
	ks, err := counts.Parse(keys, 0)
	if err != nil {
		log.Fatalf("-keys: %v", err)
	}
	for _, k := range ks {
		c.keys = append(c.keys, int64(k))
	}
	if tenMillion {
		c.keys = append(c.keys, 10_000_000)
	}
	if !slices.IsSorted(c.keys) {
		log.Fatalf("-keys: %v is not ascending", c.keys)
	}
	if c.at < 1 || c.duration <= 0 || c.rounds < 1 || slices.Contains(c.concurrency, 0) {
		log.Fatal("-at, -duration, -rounds and every -concurrency must be positive")
	}
	if only != "" {
		c.only = strings.Split(only, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, c config) (err error) {
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "idem-curve-redis-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := redisproc.Start(ctx, redisproc.Config{Dir: dir})
	if err != nil {
		return fmt.Errorf("private redis-server: %w", err)
	}
	defer srv.Kill()
	log.Printf("private redis-server on %s", srv.Addr)

	maxConc := slices.Max(append(slices.Clone(c.concurrency), c.at))
	r, err := newRedis(srv.Addr, maxConc+8)
	if err != nil {
		return err
	}
	defer r.close()

	redisIdem, redisIdemBackend, err := idemRedis(r)
	if err != nil {
		return err
	}
	mem, memBackend, err := idemMemory()
	if err != nil {
		return err
	}
	impls := []impl{naiveImpl(r), naiveRueidisImpl(r), redislockImpl(r), mem}
	impls = append(impls, redisIdem...)
	backends := []backend{
		responseBackend("redis-naive", r.naive, r), responseBackend("redis-redislock", r.redislock, r),
		memBackend, redisIdemBackend,
	}
	if c.postgres != "" {
		pg, err := newPostgres(ctx, c.postgres)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		defer func() { err = errors.Join(err, pg.close()) }()
		pgImpl, pgBackend, err := pg.impl()
		if err != nil {
			return err
		}
		impls = append(impls, pgImpl)
		backends = append(backends, pgBackend)
	}
	if c.only != nil {
		for _, name := range c.only {
			if !slices.ContainsFunc(impls, func(i impl) bool { return i.name == name }) {
				return fmt.Errorf("-only: no implementation %q here (PostgreSQL's needs -postgres)", name)
			}
		}
		impls = slices.DeleteFunc(impls, func(i impl) bool { return i.name != "naive" && !slices.Contains(c.only, i.name) })
		backends = slices.DeleteFunc(backends, func(b backend) bool {
			return !slices.ContainsFunc(impls, func(i impl) bool { return i.backend == b.name })
		})
	}

	var rows []row
	write := func() error { return writeRows(filepath.Join(c.out, "curve.csv"), rows) }
	tags := 0
	point := func(sweep string, conc int, stored int64) error {
		res, err := measurePoint(ctx, impls, backends, stored, conc, c.duration, c.rounds, &tags)
		if err != nil {
			return fmt.Errorf("%s sweep, %d goroutines, %d stored: %w", sweep, conc, stored, err)
		}
		for _, x := range res {
			x.sweep, x.stored = sweep, stored
			rows = append(rows, x)
			log.Printf("%-11s c=%-3d stored=%-8d %-19s %9.0f cycles/s  %.2fx naive", sweep, conc, stored, x.impl, x.perSecond(), x.xNaive)
		}
		return write()
	}

	// The concurrency sweep, with the first count of stored records.
	var stored int64
	var mems []memRow
	fill := func(to int64) error {
		if to == stored {
			return nil
		}
		for _, b := range backends {
			from := stored
			if b.drop != nil {
				from = 0 // transient: filled from scratch, then dropped
			}
			before, err := b.size(ctx)
			if err != nil {
				return fmt.Errorf("%s size: %w", b.name, err)
			}
			start := time.Now()
			if err := b.fill(ctx, from, to); err != nil {
				return fmt.Errorf("%s fill: %w", b.name, err)
			}
			after, err := b.size(ctx)
			if err != nil {
				return fmt.Errorf("%s size: %w", b.name, err)
			}
			mems = append(mems, memRow{backend: b.name, records: to, added: to - from, bytes: after - before, measuredBy: b.measuredBy})
			log.Printf("filled %s to %d records in %v: %.0f bytes per record added", b.name, to, time.Since(start).Round(time.Millisecond), float64(after-before)/float64(to-from))
			if b.drop != nil {
				if err := b.drop(ctx, to); err != nil {
					return fmt.Errorf("%s drop: %w", b.name, err)
				}
			}
		}
		stored = to
		return writeMemory(filepath.Join(c.out, "memory.csv"), mems)
	}
	if err := fill(c.keys[0]); err != nil {
		return err
	}
	for _, conc := range c.concurrency {
		if err := point("concurrency", conc, stored); err != nil {
			return err
		}
	}
	// The keys sweep, at c.at goroutines.
	for _, k := range c.keys {
		if err := fill(k); err != nil {
			return err
		}
		if err := point("keys", c.at, k); err != nil {
			return err
		}
	}
	return renderAll(c.out)
}

// measurePoint runs every implementation at conc goroutines for d, in
// rounds of d/rounds each: in order, then in reverse order, and so on, so
// that neither end of the list always runs on a warmer machine, and a
// change in the machine's load falls on every implementation alike. An implementation on a
// transient backend has its stored records filled before each run and
// dropped after. It returns one row per implementation with its ratio to
// the first (the naive lock).
func measurePoint(ctx context.Context, impls []impl, backends []backend, stored int64, conc int, d time.Duration, rounds int, tags *int) ([]row, error) {
	rows := make([]row, len(impls))
	for round := range rounds {
		for k := range impls {
			j := k
			if round%2 == 1 {
				j = len(impls) - 1 - k
			}
			im := impls[j]
			i := slices.IndexFunc(backends, func(b backend) bool { return b.name == im.backend && b.drop != nil })
			if i >= 0 {
				if err := backends[i].fill(ctx, 0, stored); err != nil {
					return nil, fmt.Errorf("%s: fill: %w", im.name, err)
				}
			}
			*tags++
			tag := "r" + strconv.Itoa(*tags)
			n, elapsed, err := measure(ctx, im.cycle(tag), conc, d/time.Duration(rounds))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", im.name, err)
			}
			if err := im.clean(ctx, tag, n); err != nil {
				return nil, fmt.Errorf("%s: clean: %w", im.name, err)
			}
			if i >= 0 {
				if err := backends[i].drop(ctx, stored); err != nil {
					return nil, fmt.Errorf("%s: drop: %w", im.name, err)
				}
			}
			rows[j].impl, rows[j].concurrency = im.name, conc
			rows[j].cycles += n
			rows[j].seconds += elapsed.Seconds()
		}
	}
	for i := range rows {
		rows[i].xNaive = rows[i].perSecond() / rows[0].perSecond()
	}
	return rows, nil
}

// measure runs c on conc goroutines, with keys numbered from 0, until d
// has passed, and returns how many cycles ran and how long they took
// (until the last one ended).
func measure(ctx context.Context, c cycle, conc int, d time.Duration) (int64, time.Duration, error) {
	runtime.GC() // the previous run's garbage is not this one's cost
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				if err := c(ctx, next.Add(1)-1); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if p := firstErr.Load(); p != nil {
		return next.Load(), elapsed, *p
	}
	return next.Load(), elapsed, ctx.Err()
}
