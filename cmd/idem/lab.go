package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/idemkit/idem/internal/lab"
)

// runLab runs the breach lab: every failure vector of the naive lock,
// injected for real, against the naive lock and idem, with the table of
// double executions, double effects and lost results.
func runLab(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	redisURL := fs.String("redis", "", "Redis for the scenarios that need no server of their own (default redis://127.0.0.1:6379/0)")
	pgURL := fs.String("postgres", "", "PostgreSQL for the ledger; the lab makes and drops a schema (default postgres://postgres@127.0.0.1:5432/test)")
	runs := fs.Int("runs", 0, "runs per scenario and implementation (default 1, or 5 with --long)")
	scenarios := fs.String("scenarios", "", "comma-separated scenarios to run (default all; see --list)")
	long := fs.Bool("long", false, "the soak: more keys and runs")
	list := fs.Bool("list", false, "list the scenarios and how each fault is injected")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *list {
		for _, s := range lab.ScenarioNames() {
			fmt.Fprintf(stdout, "%-16s %s\n", s[0], s[1])
		}
		return nil
	}
	if *runs < 0 {
		return fmt.Errorf("%w: --runs must be positive", errUsage)
	}
	cfg := lab.Config{RedisURL: *redisURL, PostgresURL: *pgURL, Runs: *runs, Long: *long}
	if *scenarios != "" {
		cfg.Scenarios = strings.Split(*scenarios, ",")
	}
	return lab.Main(ctx, stdout, cfg)
}
