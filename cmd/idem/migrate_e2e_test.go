package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// Issue 31, item 10: idem serve ran DDL at every start, so a role
// without the CREATE privilege could not run it; idem migrate --schema X
// made a schema nothing else could use; migrate said "up to date" after
// applying six migrations. Now the schema is the store URL's ?schema=, so
// idem migrate and idem serve given the same --store agree: idem migrate
// says what it applied, then that there is nothing to apply; a role that
// may only read and write the schema's tables runs idem serve with
// --no-migrate (and without it is refused by the database, as before),
// and idem keys goes through that gateway; --no-migrate on a schema that
// lacks migrations fails naming idem migrate; --schema and IDEM_SCHEMA
// are refused, not ignored.
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
	inSchema := func(uri, schema string) string {
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("schema", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	all, err := filepath.Glob("../../store/pgstore/migrations/*.sql") // sorted: the order they apply in
	if err != nil || len(all) == 0 {
		t.Fatalf("pgstore's migrations: %v, %v", all, err)
	}
	for i := range all {
		all[i] = filepath.Base(all[i])
	}
	db := inSchema(testenv.DatabaseURL(), schema)
	out, code := runIdem(t, "migrate", "--store", db)
	if want := fmt.Sprintf("schema %s: applied %d migrations: %s\n", schema, len(all), strings.Join(all, ", ")); code != 0 || out != want {
		t.Fatalf("idem migrate of a new schema: exit %d, %q; want %q", code, out, want)
	}
	if out, code = runIdem(t, "migrate", "--store", db); code != 0 || !strings.Contains(out, "up to date: nothing to apply") {
		t.Fatalf("idem migrate again: exit %d, %q; want up to date", code, out)
	}
	if out, code = runIdem(t, "migrate", "--store", testenv.DatabaseURL(), "--schema", schema); code != 2 || !strings.Contains(out, "?schema=") {
		t.Errorf("idem migrate --schema: exit %d, %q; want 2, naming ?schema=", code, out)
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

	up := newUpstream(t, 0)
	migrating := launchServe(t, nil, "--upstream", up.URL, "--store", asRole, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json")
	migrating.waitForLog(t, "permission denied", 1)
	if err := migrating.stop(t); err != nil {
		t.Errorf("exit after SIGTERM while the store refuses = %v; want 0", err)
	}
	g := startGateway(t, "--upstream", up.URL, "--store", asRole, "--no-migrate")
	key := "nomigrate-" + testenv.Prefix(t)
	first, again := post(t, "http://"+g.addr, key, "{}"), post(t, "http://"+g.addr, key, "{}")
	if first.status != 201 || !again.replayed || up.count(key) != 1 {
		t.Fatalf("through a gateway with --no-migrate: %d, then replayed=%v, %d executions; want 201, replayed, once", first.status, again.replayed, up.count(key))
	}
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".records WHERE idempotency_key = $1", key).Scan(&n); err != nil || n != 1 {
		t.Errorf("rows of the key in %s.records: %d, %v; want 1 (the schema idem migrate made)", schema, n, err)
	}
	if out, code = runIdem(t, "keys", "--admin", g.admin, "get", tenantOf("Bearer e2e-client"), key); code != 0 || !strings.Contains(out, key) {
		t.Errorf("idem keys get through the --no-migrate gateway: exit %d, %q; want the key's record", code, out)
	}
	unmigrated := launchServe(t, nil, "--upstream", up.URL, "--store", inSchema(testenv.DatabaseURL(), testenv.SchemaName(t)+"_never"), "--no-migrate",
		"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json")
	unmigrated.waitForLog(t, "idem migrate", 1)
	schemaVar := launchServe(t, []string{"IDEM_SCHEMA=" + schema}, "--upstream", up.URL, "--store", db, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json")
	select {
	case err := <-schemaVar.done:
		if err == nil || !strings.Contains(schemaVar.logText(), "IDEM_SCHEMA") {
			t.Errorf("idem serve with IDEM_SCHEMA: %v, %q; want refused, naming it", err, schemaVar.logText())
		}
	case <-schemaVar.ready:
		t.Errorf("idem serve with IDEM_SCHEMA serves; want refused, naming it:\n%s", schemaVar.logText())
	case <-time.After(20 * time.Second):
		t.Errorf("idem serve with IDEM_SCHEMA neither exited nor served in 20 s; want refused at once:\n%s", schemaVar.logText())
	}
}
