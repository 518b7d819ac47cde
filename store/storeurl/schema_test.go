package storeurl_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/storeurl"
)

// Check refuses, without connecting, every URL that Open refuses as a
// URL (a schema or prefix too: bad, repeated, or on a store that has
// none), and takes the forms Open takes.
func TestCheckConnectsToNothing(t *testing.T) {
	for _, uri := range []string{"", "Memory", "mongodb://u:secret@h/db", "redis://:secret@host:notaport",
		"redis://:secret@h/0?coalesce=yes", "redis://h/0?near_cache=on&near_cache_bytes=x",
		"redis://:secret@h/0+postgres://u:secret@h:notaport/db", "postgres://u:secret@h:notaport/db",
		"postgres://u:secret@h/db?schema=Bad-Name", "postgres://u:secret@h/db?schema=a&schema=a", "postgres://u:secret@h/db?schema=",
		"redis://:secret@h/0?schema=idem", "redis://:secret@h/0?prefix={x}", "redis://:secret@h/0?prefix=p+postgres://u@h/db?schema=Bad",
		"redis://:secret@h/0?near_cache=on+postgres://u@h/db"} {
		err := storeurl.Check(uri, nil)
		if !errors.Is(err, storeurl.ErrBadURL) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Check(%q) = %v; want ErrBadURL, without the password", uri, err)
		}
	}
	// Port 1 answers nothing: a check that dialled would fail or hang.
	for _, uri := range []string{"memory", "redis://127.0.0.1:1/0?near_cache=on", "redis-cluster://127.0.0.1:1",
		"postgres://u@127.0.0.1:1/db?schema=other", "redis://127.0.0.1:1/0?prefix=p:+postgres://u@127.0.0.1:1/db?schema=other&sslmode=disable"} {
		if err := storeurl.Check(uri, nil); err != nil {
			t.Errorf("Check(%q) = %v; want nil", uri, err)
		}
	}
}

// Issue 31 item 10: Migrate applies the migrations to the schema of the
// URL's ?schema= and says which it applied, then that none is left;
// Options.NoMigrate refuses a schema that lacks migrations, naming them,
// and opens one that has them all, under the same URL: the URL is the
// one home of the schema, so the migration and the store agree.
func TestMigrateThenOpenWithoutMigrating(t *testing.T) {
	_, schema := testenv.Postgres(t) // an empty schema of this test's, dropped after it; skips when PostgreSQL is down
	ctx := context.Background()
	all, err := filepath.Glob("../pgstore/migrations/*.sql") // sorted: the order they apply in
	if err != nil || len(all) == 0 {
		t.Fatalf("pgstore's migrations: %v, %v", all, err)
	}
	for i := range all {
		all[i] = filepath.Base(all[i])
	}
	last := all[len(all)-1]
	pg := withParam(testenv.DatabaseURL(), "schema", schema)
	forms := []string{pg, testenv.RedisURL() + "+" + pg}
	for _, uri := range forms {
		_, err := storeurl.Open(ctx, uri, &storeurl.Options{NoMigrate: true})
		if !errors.Is(err, storeurl.ErrNotMigrated) || !strings.Contains(err.Error(), last) {
			t.Fatalf("Open(%q) of an empty schema without migrating = %v; want ErrNotMigrated naming the migrations", uri, err)
		}
	}
	if _, _, err := storeurl.Migrate(ctx, testenv.RedisURL()); !errors.Is(err, storeurl.ErrBadURL) {
		t.Errorf("Migrate of a Redis store = %v; want ErrBadURL: it has no PostgreSQL", err)
	}
	got, applied, err := storeurl.Migrate(ctx, forms[1]) // the layered form migrates its PostgreSQL part
	if err != nil || got != schema || !slices.Equal(applied, all) {
		t.Fatalf("Migrate(%q) = %q, %v, %v; want %s and the migrations %v", forms[1], got, applied, err, schema, all)
	}
	if got, applied, err = storeurl.Migrate(ctx, pg); err != nil || got != schema || len(applied) != 0 {
		t.Fatalf("Migrate again = %q, %v, %v; want nothing applied", got, applied, err)
	}
	for _, uri := range forms {
		s, err := storeurl.Open(ctx, uri, &storeurl.Options{NoMigrate: true})
		if err != nil {
			t.Fatalf("Open(%q) of a migrated schema without migrating = %v", uri, err)
		}
		if _, err := s.Get(ctx, store.ID{Tenant: "t", Key: "k"}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get = %v; want ErrNotFound", err)
		}
		s.Close()
	}
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var tables int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'records'", schema).Scan(&tables); err != nil || tables != 1 {
		t.Fatalf("records tables in %s: %d, %v; want 1", schema, tables, err)
	}
}
