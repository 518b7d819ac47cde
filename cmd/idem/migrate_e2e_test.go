package main

import (
	"context"
	"crypto/rand"
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testinfra/testenv"
)

// runIdem runs the binary with args and returns its output and exit status.
func runIdem(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// Issue 31, item 10: idem serve and idem keys ran DDL at every start, so a
// role without the CREATE privilege could not run them; idem migrate
// --schema X made a schema nothing else could use; migrate said "up to
// date" after applying six migrations. Now: idem migrate --schema X says
// what it applied, then that there is nothing to apply; a role that may
// only read and write X's tables runs idem keys and idem serve with
// --schema X --no-migrate (and without --no-migrate is refused by the
// database, as before); --no-migrate on a schema that lacks migrations
// fails naming idem migrate.
func TestNoMigrateWithARoleWithoutCreate(t *testing.T) {
	testenv.Postgres(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) }) // after the drops below (cleanups run last first)
	schema := testenv.SchemaName(t)
	role := "idemtest_role_" + strings.ToLower(rand.Text()[:10])
	t.Cleanup(func() {
		ctx := context.Background()
		drop := []string{"DROP SCHEMA IF EXISTS " + schema + " CASCADE"}
		var exists bool
		if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", role).Scan(&exists); err != nil || exists {
			drop = append(drop, "DROP OWNED BY "+role, "DROP ROLE "+role)
		}
		for _, sql := range drop {
			if _, err := admin.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	db := testenv.DatabaseURL()
	out, code := runIdem(t, "migrate", "--store", db, "--schema", schema)
	if code != 0 || !strings.Contains(out, "schema "+schema+": applied 6 migrations: 001_records.sql, ") || !strings.Contains(out, "006_key_until.sql") {
		t.Fatalf("idem migrate of a new schema: exit %d, %q; want the 6 migrations it applied", code, out)
	}
	if out, code = runIdem(t, "migrate", "--store", db, "--schema", schema); code != 0 || !strings.Contains(out, "up to date: nothing to apply") {
		t.Fatalf("idem migrate again: exit %d, %q; want up to date", code, out)
	}
	for _, sql := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
		"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + role,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	asRole := u.String()

	if out, code = runIdem(t, "keys", "--store", asRole, "--schema", schema, "list", "--unknown"); code == 0 || !strings.Contains(out, "permission denied") {
		t.Errorf("idem keys as a role without CREATE, migrating: exit %d, %q; want the database's refusal", code, out)
	}
	if out, code = runIdem(t, "keys", "--store", asRole, "--schema", schema, "--no-migrate", "list", "--unknown"); code != 0 {
		t.Errorf("idem keys --no-migrate as a role without CREATE: exit %d, %q; want 0", code, out)
	}
	if out, code = runIdem(t, "keys", "--store", db, "--schema", testenv.SchemaName(t), "--no-migrate", "list", "--unknown"); code != 1 || !strings.Contains(out, "idem migrate") {
		t.Errorf("idem keys --no-migrate on a schema never migrated: exit %d, %q; want 1, naming idem migrate", code, out)
	}

	up := newUpstream(t, 0)
	migrating := launchServe(t, nil, "--upstream", up.URL, "--store", asRole, "--schema", schema, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json")
	migrating.waitForLog(t, "permission denied", 1)
	if err := migrating.stop(t); err != nil {
		t.Errorf("exit after SIGTERM while the store refuses = %v; want 0", err)
	}
	g := startGateway(t, "--upstream", up.URL, "--store", asRole, "--schema", schema, "--no-migrate")
	key := "nomigrate-" + testenv.Prefix(t)
	first, again := post(t, "http://"+g.addr, key, "{}"), post(t, "http://"+g.addr, key, "{}")
	if first.status != 201 || !again.replayed || up.count(key) != 1 {
		t.Fatalf("through a gateway with --no-migrate: %d, then replayed=%v, %d executions; want 201, replayed, once", first.status, again.replayed, up.count(key))
	}
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".records WHERE idempotency_key = $1", key).Scan(&n); err != nil || n != 1 {
		t.Errorf("rows of the key in %s.records: %d, %v; want 1 (the schema idem migrate made)", schema, n, err)
	}
	unmigrated := launchServe(t, nil, "--upstream", up.URL, "--store", db, "--schema", testenv.SchemaName(t), "--no-migrate",
		"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json")
	unmigrated.waitForLog(t, "idem migrate", 1)
}
