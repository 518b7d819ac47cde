package lab

import (
	"bytes"
	"context"
	"flag"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	MaybeRunWorker() // worker-kill runs its workers as processes of this test binary
	goleak.VerifyTestMain(m)
}

var (
	table = flag.Bool("lab.table", false, "run TestTable: every scenario, and print the table")
	long  = flag.Bool("lab.long", false, "with -lab.table: the long soak")
	runs  = flag.Int("lab.runs", 0, "with -lab.table: runs per scenario and implementation (0: 1, or 5 with -lab.long)")
)

func config(t *testing.T) Config {
	t.Helper()
	testenv.Redis(t) // skips, or fails under CI, when Redis is down
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL())
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL at "+testenv.DatabaseURL(), err)
	}
	conn.Close(ctx)
	return Config{RedisURL: testenv.RedisURL(), PostgresURL: testenv.DatabaseURL()}
}

// runScenario runs one scenario, short, and returns its rows by implementation.
func runScenario(t *testing.T, name string) map[string]Row {
	t.Helper()
	cfg := config(t)
	cfg.Scenarios = []string{name}
	// A scenario takes about 10 s on a quiet machine and several times
	// that on a loaded one; this bound only stops a hung run before the
	// test binary's own -timeout does, with the scenario named.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rows, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	PrintTable(&buf, rows)
	t.Log("\n" + buf.String())
	out := map[string]Row{}
	for _, r := range rows {
		out[r.Impl] = r
	}
	return out
}

// row returns the row of impl, failing t when the scenario did not run it:
// an absent row would pass every check by reading zeros.
func row(t *testing.T, rows map[string]Row, impl string) Row {
	t.Helper()
	r, ok := rows[impl]
	if !ok || r.Runs == 0 || r.Requests == 0 {
		t.Fatalf("no %s row with requests in %v", impl, rows)
	}
	return r
}

// guarded asserts what the PostgreSQL guardrail promises in every scenario.
func guarded(t *testing.T, rows map[string]Row) {
	t.Helper()
	r := row(t, rows, implIdemRedisPG)
	if r.DoubleEffects != 0 || r.LostResults != 0 || r.Stuck != 0 {
		t.Errorf("%s: %d double effects, %d lost results, %d stuck keys; want 0", implIdemRedisPG, r.DoubleEffects, r.LostResults, r.Stuck)
	}
}

func breaches(t *testing.T, rows map[string]Row, impl string) {
	t.Helper()
	if r := row(t, rows, impl); r.DoubleExec == 0 && r.LostResults == 0 {
		t.Errorf("%s: no double execution and no lost result: the fault did not bite", impl)
	}
}

func noDoubleExec(t *testing.T, rows map[string]Row, impl string) {
	t.Helper()
	if r := row(t, rows, impl); r.DoubleExec != 0 || r.DoubleEffects != 0 || r.LostResults != 0 {
		t.Errorf("%s: %d double executions, %d double effects, %d lost results; want 0", impl, r.DoubleExec, r.DoubleEffects, r.LostResults)
	}
}

func TestStallBefore(t *testing.T) {
	rows := runScenario(t, "stall-before")
	breaches(t, rows, implNaive)
	noDoubleExec(t, rows, implIdemRedis)
	noDoubleExec(t, rows, implIdemMemory)
	noDoubleExec(t, rows, implReconcile)
	guarded(t, rows)
}

func TestStallAfter(t *testing.T) {
	rows := runScenario(t, "stall-after")
	breaches(t, rows, implNaive)
	guarded(t, rows)
	// The stalled owner's lease ended after its charge: idem keeps the key
	// UNKNOWN instead of running it again, and the lookup finds the charge.
	noDoubleExec(t, rows, implIdemRedis)
	noDoubleExec(t, rows, implIdemMemory)
	noDoubleExec(t, rows, implReconcile)
	// The provider's own key stops the second charge, though the
	// application's unguarded ledger still records it twice.
	if r := rows[implProviderKey]; r.DoubleExec != 0 || r.LostResults != 0 {
		t.Errorf("%s: %d double executions, %d lost results; want 0", implProviderKey, r.DoubleExec, r.LostResults)
	}
}

func TestRelease(t *testing.T) {
	rows := runScenario(t, "release")
	breaches(t, rows, implNaiveDel)
	noDoubleExec(t, rows, implIdemRedis)
	guarded(t, rows)
}

func TestFailover(t *testing.T) {
	rows := runScenario(t, "failover")
	breaches(t, rows, implNaive)
	guarded(t, rows)
}

func TestCrash(t *testing.T) {
	rows := runScenario(t, "crash")
	breaches(t, rows, implNaive)
	guarded(t, rows)
}

func TestClockJump(t *testing.T) {
	rows := runScenario(t, "clock-jump")
	breaches(t, rows, implNaive)
	guarded(t, rows)
}

func TestLostReplies(t *testing.T) {
	rows := runScenario(t, "lost-replies")
	noDoubleExec(t, rows, implIdemRedis)
	guarded(t, rows)
}

func TestDelayedReplies(t *testing.T) {
	rows := runScenario(t, "delayed-replies")
	noDoubleExec(t, rows, implIdemRedis)
	guarded(t, rows)
}

func TestPGKill(t *testing.T) {
	rows := runScenario(t, "pg-kill")
	guarded(t, rows)
	// The charge is outside the database transaction, which died: the
	// worker keeps the key UNKNOWN instead of releasing it for a retry to
	// charge again.
	noDoubleExec(t, rows, implIdemRedisPG)
	if r := rows[implIdemRedisPG]; r.Unknown == 0 {
		t.Errorf("%s: no key left UNKNOWN: the terminated backend did not bite", implIdemRedisPG)
	}
	if r := rows[implPGKey]; r.DoubleExec != 0 || r.DoubleEffects != 0 || r.LostResults != 0 {
		t.Errorf("%s: %d double executions, %d double effects, %d lost results; want 0", implPGKey, r.DoubleExec, r.DoubleEffects, r.LostResults)
	}
}

func TestPGLostCommit(t *testing.T) {
	rows := runScenario(t, "pg-lost-commit")
	guarded(t, rows)
	noDoubleExec(t, rows, implIdemRedisPG)
}

func TestBurst(t *testing.T) {
	rows := runScenario(t, "burst")
	for impl, r := range rows {
		if r.Requests < 1000 {
			t.Errorf("%s: %d requests, want at least 1000", impl, r.Requests)
		}
	}
	noDoubleExec(t, rows, implIdemRedis)
	noDoubleExec(t, rows, implIdemMemory)
	guarded(t, rows)
}

// unknownOutcomes asserts what the vectors of unknown outcomes must show:
// idem never runs an unknown outcome again (0 double executions), on Redis
// alone it keeps such keys UNKNOWN, and with the provider's lookup it
// learns every outcome.
func unknownOutcomes(t *testing.T, rows map[string]Row) {
	t.Helper()
	noDoubleExec(t, rows, implIdemRedis)
	noDoubleExec(t, rows, implIdemRedisPG)
	noDoubleExec(t, rows, implReconcile)
	guarded(t, rows)
	if r := row(t, rows, implReconcile); r.Stuck != 0 {
		t.Errorf("%s: %d stuck keys; want 0", implReconcile, r.Stuck)
	}
}

func TestProviderCut(t *testing.T) {
	t.Parallel() // no timing assumptions; each run has its own keys, schema and servers
	rows := runScenario(t, "provider-cut")
	breaches(t, rows, implNaive)
	unknownOutcomes(t, rows)
	if r := row(t, rows, implIdemRedis); r.Unknown == 0 {
		t.Errorf("%s: no key left UNKNOWN: the cut did not bite", implIdemRedis)
	}
	if r := row(t, rows, implReconcile); r.Unknown != 0 {
		t.Errorf("%s: %d keys left UNKNOWN; the provider's lookup knows every charge", implReconcile, r.Unknown)
	}
}

func TestProviderSlow(t *testing.T) {
	t.Parallel() // no timing assumptions; each run has its own keys, schema and servers
	rows := runScenario(t, "provider-slow")
	breaches(t, rows, implNaive)
	unknownOutcomes(t, rows)
	if r := row(t, rows, implIdemRedis); r.Unknown == 0 {
		t.Errorf("%s: no key left UNKNOWN: the timeout did not bite", implIdemRedis)
	}
}

func TestWorkerKill(t *testing.T) {
	t.Parallel() // no timing assumptions; each run has its own keys, schema and servers
	rows := runScenario(t, "worker-kill")
	breaches(t, rows, implNaive)
	unknownOutcomes(t, rows)
	if r := row(t, rows, implIdemRedis); r.Unknown == 0 {
		t.Errorf("%s: no key left UNKNOWN: the kill did not bite", implIdemRedis)
	}
}

func TestStoreStop(t *testing.T) {
	t.Parallel() // no timing assumptions; each run has its own keys, schema and servers
	rows := runScenario(t, "store-stop")
	unknownOutcomes(t, rows)
}

func TestUnknownScenario(t *testing.T) {
	cfg := config(t)
	cfg.Scenarios = []string{"no-such"}
	if _, err := Run(context.Background(), cfg, nil); err == nil {
		t.Fatal("Run accepted an unknown scenario")
	}
}

// TestTable prints the lab's table over every scenario, for
// docs/failure-model.md and the soak (Makefile: lab-soak):
//
//	go test ./internal/lab -run TestTable -v -timeout 30m -lab.table [-lab.long] [-lab.runs N]
func TestTable(t *testing.T) {
	if !*table {
		t.Skip("the full table runs with -lab.table")
	}
	cfg := config(t)
	cfg.Long, cfg.Runs = *long, *runs
	var buf bytes.Buffer
	err := Main(context.Background(), &buf, cfg)
	t.Log("\n" + buf.String())
	if err != nil {
		t.Fatal(err)
	}
}
