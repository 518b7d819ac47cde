package check

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// config is one store configuration of the campaign.
type config struct {
	name string
	// promise is what the docs say of the configuration: safe (a
	// violation fails the run), unsafe (expected: the run passes when the
	// checker finds one), or narrowed (Redis replication with ReplicaAcks:
	// the docs say it narrows the failover window and does not close it;
	// violations are counted, and fail nothing).
	promise string
	setup   func(t *testing.T) *Env
	work    Workload
	// short is the number of runs of a short campaign (0: one): the
	// product's profiles (productProfiles) need one run each.
	short int
}

// campaign says what to run, from the environment:
//
//	IDEM_CHECK=short|long   short: one run of each configuration (the
//	                        product: one per profile; an expected unsafe one
//	                        runs until a violation, up to 5 runs);
//	                        long: 50 runs of each
//	IDEM_CHECK_CONFIGS=a,b  only these configurations
//	IDEM_CHECK_RUNS=N       N runs of each instead
//	IDEM_CHECK_SEED=S       the seed of the first run (the next get S+1, ...)
//	IDEM_CHECK_EXPECT=violation  every configuration must show a violation
//	                        (scripts/mutate.sh: a mutation must be caught);
//	                        runs stop at the first
//	IDEM_CHECK_OUT=DIR      where violations are written (default check-out/)
type campaign struct {
	mode, out string
	only      []string
	runs      int
	seed      uint64
	expect    bool
}

func campaignFromEnv(t *testing.T) campaign {
	c := campaign{mode: os.Getenv("IDEM_CHECK"), out: os.Getenv("IDEM_CHECK_OUT"), expect: os.Getenv("IDEM_CHECK_EXPECT") == "violation"}
	if c.mode != "short" && c.mode != "long" {
		t.Skip("the check campaign runs with IDEM_CHECK=short or long (make check-short, make check)")
	}
	if c.out == "" {
		c.out = filepath.Join("..", "..", "check-out")
	}
	if v := os.Getenv("IDEM_CHECK_CONFIGS"); v != "" {
		c.only = strings.Split(v, ",")
	}
	c.runs = map[string]int{"short": 1, "long": 50}[c.mode]
	if v := os.Getenv("IDEM_CHECK_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("IDEM_CHECK_RUNS=%q", v)
		}
		c.runs = n
	}
	c.seed = uint64(time.Now().UnixNano() % 1e9)
	if v := os.Getenv("IDEM_CHECK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("IDEM_CHECK_SEED=%q", v)
		}
		c.seed = s
	}
	return c
}

// TestCampaign runs the configurations under their nemeses and checks
// every run's history.
func TestCampaign(t *testing.T) {
	c := campaignFromEnv(t)
	redis.SetLogger(quietLogger{}) // go-redis logs every failed dial while a server is down
	for _, cfg := range configs() {
		if c.only != nil && !slices.Contains(c.only, cfg.name) {
			continue
		}
		t.Run(cfg.name, func(t *testing.T) { c.runConfig(t, cfg) })
	}
}

func (c campaign) runConfig(t *testing.T, cfg config) {
	env := cfg.setup(t)
	runs := c.runs
	if c.mode == "short" && os.Getenv("IDEM_CHECK_RUNS") == "" {
		runs = max(runs, cfg.short)
	}
	safe := cfg.promise == "safe"
	hunting := c.expect || cfg.promise == "unsafe" // stop at the first violation
	if hunting && c.mode == "short" && os.Getenv("IDEM_CHECK_RUNS") == "" {
		runs = 5
	}
	var total RunStats
	violations, failedRuns, inconclusive, done := 0, 0, 0, 0
	for r := range runs {
		seed := c.seed + uint64(r)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		h, st, err := Run(ctx, env, cfg.work, seed)
		cancel()
		if err != nil {
			t.Fatalf("%s seed %d: %v", cfg.name, seed, err)
		}
		done++
		total.Ops += st.Ops
		total.Faults += st.Faults
		v := Check(h, Options{Staleness: int64(env.Staleness), Slack: int64(5 * time.Millisecond)}, 20*time.Second)
		if v.Inconclusive > 0 {
			inconclusive++
			dir := filepath.Join(c.out, fmt.Sprintf("%s-%d-inconclusive", cfg.name, seed))
			if err := writeHistory(dir, h); err != nil {
				t.Log(err)
			}
		}
		t.Logf("%s seed %d: %d ops, %d faults (%s), %d effects, %d results given: %s (%d keys inconclusive), %d violations",
			cfg.name, seed, st.Ops, st.Faults, strings.Join(st.Nemeses, ", "), len(h.Effects), len(h.Given), v.Linearizable, v.Inconclusive, len(v.Violations))
		if !v.Failed() {
			continue
		}
		failedRuns++
		violations += len(v.Violations)
		dir := filepath.Join(c.out, fmt.Sprintf("%s-%d", cfg.name, seed))
		if err := v.Write(dir, cfg.name, seed, h); err != nil {
			t.Errorf("writing %s: %v", dir, err)
		}
		if env.Keep != nil {
			if err := env.Keep(dir); err != nil {
				t.Errorf("writing %s: %v", dir, err)
			}
		}
		if h.Config != "" {
			t.Logf("  the run's configuration (also in %s/config.txt):\n%s", dir, h.Config)
		}
		for i, x := range v.Violations {
			if i == 5 {
				t.Logf("  ... %d more in %s", len(v.Violations)-5, dir)
				break
			}
			t.Logf("  %s", x)
		}
		if safe && !c.expect {
			t.Errorf("%s seed %d: %d violations in a configuration the docs call safe; see %s", cfg.name, seed, len(v.Violations), dir)
		}
		if hunting {
			break
		}
	}
	line := fmt.Sprintf("%-22s promise=%-8s runs=%d ops=%d faults=%d violations=%d runs-with-violations=%d inconclusive=%d",
		cfg.name, cfg.promise, done, total.Ops, total.Faults, violations, failedRuns, inconclusive)
	t.Log(line)
	appendSummary(t, c.out, line)
	if hunting && failedRuns == 0 {
		t.Errorf("%s: the checker found no violation in %d runs, and this run expects one", cfg.name, done)
	}
}

// appendSummary adds one line per configuration to DIR/summary.txt, the
// figures docs/checking.md quotes.
func appendSummary(t *testing.T, dir, line string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Log(err)
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, "summary.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Log(err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339), line)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// writeHistory keeps the history of a run the checker could not decide.
func writeHistory(dir string, h History) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := MarshalHistory(h)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644)
}
