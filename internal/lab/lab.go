package lab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/store/redisstore"
)

// Config says which scenarios Main runs and against which servers. The
// zero Config runs every scenario once, short, on the local servers.
type Config struct {
	// RedisURL is the Redis for the scenarios that need no server of their
	// own. Zero means redis://127.0.0.1:6379/0. Failover, crash and clock
	// scenarios start their own redis-server on free loopback ports.
	RedisURL string
	// PostgresURL is the database of the ledger; the lab creates a schema
	// and drops it at the end. Zero means postgres://postgres@127.0.0.1:5432/test.
	PostgresURL string
	// Runs is how often each scenario runs per implementation. Zero means 1
	// (short) or 5 (Long).
	Runs int
	// Scenarios names the scenarios to run (see ScenarioNames). Empty means all.
	Scenarios []string
	// Long runs the soak: more keys per run. False runs the short version
	// the test suite uses (a few seconds per scenario).
	Long bool
}

// Row is the result of one scenario with one implementation, summed over its runs.
type Row struct {
	Scenario string
	Impl     string
	Runs     int
	Counts
}

// ErrUnknownScenario: Config.Scenarios names a scenario the lab does not have.
var ErrUnknownScenario = errors.New("lab: unknown scenario")

// ScenarioNames returns the scenarios in the order Main runs them, each
// with how its fault is injected.
func ScenarioNames() [][2]string {
	var out [][2]string
	for _, s := range scenarios() {
		out = append(out, [2]string{s.name, s.vector})
	}
	return out
}

// Main runs the scenarios of cfg and prints the table to w.
func Main(ctx context.Context, w io.Writer, cfg Config) error {
	rows, err := Run(ctx, cfg, func(r Row) {
		fmt.Fprintf(w, "  %-16s %-24s done\n", r.Scenario, r.Impl)
	})
	if len(rows) > 0 {
		fmt.Fprintln(w)
		PrintTable(w, rows)
	}
	return err
}

// Run runs the scenarios of cfg and returns one row per scenario and
// implementation. progress, when not nil, is called after each row.
func Run(ctx context.Context, cfg Config, progress func(Row)) ([]Row, error) {
	lb, err := newLab(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer lb.close()
	var selected []*scenario
	for _, s := range scenarios() {
		if len(cfg.Scenarios) == 0 || slices.Contains(cfg.Scenarios, s.name) {
			selected = append(selected, s)
		}
	}
	for _, name := range cfg.Scenarios {
		if !slices.ContainsFunc(selected, func(s *scenario) bool { return s.name == name }) {
			return nil, fmt.Errorf("%w: %q", ErrUnknownScenario, name)
		}
	}
	runs := cfg.Runs
	if runs <= 0 {
		runs = 1
		if cfg.Long {
			runs = 5
		}
	}
	var rows []Row
	for _, s := range selected {
		for _, im := range s.impls {
			row := Row{Scenario: s.name, Impl: im.name}
			for range runs {
				c, err := lb.runOne(ctx, s, im)
				if err != nil {
					return rows, fmt.Errorf("lab: %s with %s: %w", s.name, im, err)
				}
				row.Runs++
				row.add(c)
			}
			rows = append(rows, row)
			if progress != nil {
				progress(row)
			}
		}
	}
	return rows, nil
}

func newLab(ctx context.Context, cfg Config) (*lab, error) {
	tmp, err := os.MkdirTemp("", "idem-lab-")
	if err != nil {
		return nil, err
	}
	lb := &lab{tmp: tmp, pgURL: cmp.Or(cfg.PostgresURL, "postgres://postgres@127.0.0.1:5432/test"), lease: 300 * time.Millisecond, keys: 6}
	if cfg.Long {
		lb.lease, lb.keys = 500*time.Millisecond, 24
	}
	if err := lb.openRedis(ctx, cfg.RedisURL); err != nil {
		lb.close()
		return nil, err
	}
	if lb.pg, err = openPG(ctx, lb.pgURL); err != nil {
		lb.close()
		return nil, fmt.Errorf("%w\n%s", err, needServers)
	}
	return lb, nil
}

// needServers says what the lab needs and how to get it, for a machine
// where a server it needs does not answer.
const needServers = `idem lab needs PostgreSQL (the ledger; --postgres, default postgres://postgres@127.0.0.1:5432/test)
and redis-server installed (it starts servers of its own; --redis names one to use for the
scenarios that need none, default: 127.0.0.1:6379 if it answers, else one it starts).
On Debian, as root, scripts/services.sh installs and starts both.`

// openRedis sets lb.redis: url, or without one the Redis on
// 127.0.0.1:6379 if it answers, else a redis-server of the lab's own (as
// the failover and crash scenarios start theirs), so that a machine with
// redis-server installed but not running still runs the lab.
func (lb *lab) openRedis(ctx context.Context, url string) error {
	given := url != ""
	// redisstore's check first: go-redis alone drops a query pair it
	// cannot parse, and its option with it.
	uri := cmp.Or(url, defaultRedisURL)
	if err := redisstore.CheckURL(uri); err != nil {
		return fmt.Errorf("lab: Redis URL: %w", err)
	}
	ropts, err := redis.ParseURL(uri)
	if err != nil {
		return fmt.Errorf("lab: Redis URL: %w", err)
	}
	ropts.ContextTimeoutEnabled = true
	err = ping(ctx, ropts)
	switch {
	case err == nil:
		lb.redis = ropts
		return nil
	case given:
		return fmt.Errorf("lab: Redis at %s (--redis): %w", ropts.Addr, err)
	}
	srv, startErr := lb.startRedis(ctx, nil)
	if startErr != nil {
		return fmt.Errorf("lab: no Redis answers at %s (%w), and starting one failed: %w\n%s", ropts.Addr, err, startErr, needServers)
	}
	lb.ownRedis = srv
	lb.redis = &redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true}
	return nil
}

// defaultRedisURL is the Redis the lab uses when one answers there and
// --redis names none; a variable for the test of a machine without one.
var defaultRedisURL = "redis://127.0.0.1:6379/0"

// ping checks that the Redis of opts answers, within 3 s.
func ping(ctx context.Context, opts *redis.Options) error {
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

func (lb *lab) close() {
	if lb.pg != nil {
		lb.pg.close()
	}
	if lb.ownRedis != nil {
		lb.ownRedis.Kill()
	}
	os.RemoveAll(lb.tmp)
}

// PrintTable writes rows as an aligned table, with a legend.
func PrintTable(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\timplementation\truns\trequests\ttimeouts\tdouble exec\tdouble effects\tlost results\tunknown\tstuck keys\tfenced\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r.Scenario, r.Impl, r.Runs, r.Requests, r.Timeouts,
			r.DoubleExec, r.DoubleEffects, r.LostResults, r.Unknown, r.Stuck, r.Fenced)
	}
	tw.Flush()
	fmt.Fprintln(w, `
timeouts: requests whose client timed out (outcome unknown to it). double exec: keys the
provider charged more than once. double effects: keys with more than one committed ledger row.
lost results: keys whose acknowledged result was later replayed differently. unknown: keys
no client got a result for because idem kept them UNKNOWN (it may have run; it never runs
again unasked). stuck keys: keys no client got any answer for. fenced: stale owners refused
(lease check, fenced finalize, ledger fence).`)
	var unsafe []string
	for _, r := range rows {
		if r.Impl == idemRedis.name && (r.DoubleExec > 0 || r.LostResults > 0) {
			unsafe = append(unsafe, r.Scenario)
		}
	}
	if len(unsafe) > 0 {
		fmt.Fprintf(w, "\nidem on Redis alone is not safe under %s: the PostgreSQL guardrail (idem-redis+pg)\n"+
			"closes double effects and lost results; the provider's idempotency key closes double charges.\n",
			strings.Join(unsafe, ", "))
	}
}
