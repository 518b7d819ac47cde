package storeurl_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testinfra/testenv"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/storeurl"
)

// Check refuses, without connecting, every URL that Open refuses as a
// URL, and a schema for a store without PostgreSQL; it takes the forms
// Open takes.
func TestCheckConnectsToNothing(t *testing.T) {
	for _, uri := range []string{"", "Memory", "mongodb://u:secret@h/db", "redis://:secret@host:notaport",
		"redis://:secret@h/0?coalesce=yes", "redis://h/0?near_cache=on&near_cache_bytes=x",
		"redis://:secret@h/0+postgres://u:secret@h:notaport/db", "postgres://u:secret@h:notaport/db"} {
		err := storeurl.Check(uri, nil)
		if !errors.Is(err, storeurl.ErrBadURL) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Check(%q) = %v; want ErrBadURL, without the password", uri, err)
		}
	}
	// Port 1 answers nothing: a check that dialled would fail or hang.
	for _, uri := range []string{"memory", "redis://127.0.0.1:1/0?near_cache=on", "redis-cluster://127.0.0.1:1",
		"postgres://u@127.0.0.1:1/db", "redis://127.0.0.1:1/0+postgres://u@127.0.0.1:1/db"} {
		if err := storeurl.Check(uri, nil); err != nil {
			t.Errorf("Check(%q) = %v; want nil", uri, err)
		}
	}
	for _, uri := range []string{"memory", "redis://127.0.0.1:1/0"} {
		if err := storeurl.Check(uri, &storeurl.Options{Schema: "x"}); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("Check(%q) with a schema = %v; want an error: it has no PostgreSQL", uri, err)
		}
	}
	if err := storeurl.Check("postgres://u@127.0.0.1:1/db", &storeurl.Options{Schema: "Bad-Name"}); err == nil {
		t.Error("Check with the schema Bad-Name = nil; want an error")
	}
}

// Options.Schema puts the tables in that schema; Options.NoMigrate
// refuses a schema that lacks migrations, naming them, and opens one that
// has them all.
func TestOpenSchemaAndNoMigrate(t *testing.T) {
	_, _ = testenv.Postgres(t) // skips when PostgreSQL is down
	ctx := context.Background()
	schema := testenv.SchemaName(t)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), testenv.DatabaseURL())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	for _, uri := range []string{testenv.DatabaseURL(), testenv.RedisURL() + "+" + testenv.DatabaseURL()} {
		_, _, err := storeurl.Open(ctx, uri, &storeurl.Options{Schema: schema, NoMigrate: true})
		if !errors.Is(err, storeurl.ErrNotMigrated) || !strings.Contains(err.Error(), "006_key_until.sql") {
			t.Fatalf("Open(%q) of an empty schema without migrating = %v; want ErrNotMigrated naming the migrations", uri, err)
		}
	}
	_, closeStore, err := storeurl.Open(ctx, testenv.DatabaseURL(), &storeurl.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	closeStore()
	for _, uri := range []string{testenv.DatabaseURL(), testenv.RedisURL() + "+" + testenv.DatabaseURL()} {
		s, closeStore, err := storeurl.Open(ctx, uri, &storeurl.Options{Schema: schema, NoMigrate: true})
		if err != nil {
			t.Fatalf("Open(%q) of a migrated schema without migrating = %v", uri, err)
		}
		if _, err := s.Get(ctx, store.ID{Tenant: "t", Key: "k"}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get = %v; want ErrNotFound", err)
		}
		closeStore()
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
