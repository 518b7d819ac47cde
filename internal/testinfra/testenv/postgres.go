package testenv

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DatabaseURL returns the PostgreSQL database for tests.
func DatabaseURL() string {
	return envOr("IDEM_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

// Postgres creates a schema that only t uses, and returns a pool on the
// test database whose connections have that schema as their search_path,
// and the schema's name. The schema is dropped and the pool closed when t
// ends.
func Postgres(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(DatabaseURL())
	if err != nil {
		t.Fatalf("testenv: IDEM_TEST_DATABASE_URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		Unavailable(t, "PostgreSQL at "+DatabaseURL(), err)
	}
	defer admin.Close(context.Background())
	schema := SchemaName(t)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testenv: create schema %s: %v", schema, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
		if err != nil {
			t.Errorf("testenv: drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("testenv: drop schema %s: %v", schema, err)
		}
	})
	return pool, schema
}

// SchemaName returns a PostgreSQL schema name for t that no other test or
// run shares: lower case, at most 63 bytes.
func SchemaName(t testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '_'
	}, t.Name())
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return "idemtest_" + name + "_" + strings.ToLower(rand.Text()[:8])
}
