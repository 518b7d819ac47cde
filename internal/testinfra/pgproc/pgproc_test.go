package pgproc_test

import (
	"context"
	"os"
	"testing"

	"github.com/idemkit/idem/internal/testinfra/pgproc"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCrashKeepsCommits: a row committed before a SIGKILL of every
// process of the server is there after the restart.
func TestCrashKeepsCommits(t *testing.T) {
	dir, err := os.MkdirTemp("", "pgproc-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := pgproc.Start(t.Context(), dir)
	if err != nil {
		t.Skipf("no PostgreSQL to start: %v", err)
	}
	t.Cleanup(s.Kill)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		c, err := pgx.Connect(ctx, s.URL(""))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec("CREATE TABLE t (x int); INSERT INTO t VALUES (42)")
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, s.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var x int
	if err := c.QueryRow(ctx, "SELECT x FROM t").Scan(&x); err != nil || x != 42 {
		t.Fatalf("after the crash: %d, %v; want 42", x, err)
	}
}
