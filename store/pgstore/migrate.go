package pgstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DefaultSchema is the schema that holds the store's tables when
// Options.Schema is empty.
const DefaultSchema = "idem"

// validSchema keeps schema names to plain unquoted identifiers, so they
// can be spliced into SQL text (including the regclass literal of the
// fence sequence) without quoting rules.
var validSchema = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func checkSchema(schema string) error {
	if !validSchema.MatchString(schema) {
		return fmt.Errorf("%w: schema %q: want lower-case letters, digits and _, at most 63, not starting with a digit", ErrConfig, schema)
	}
	return nil
}

// TxBeginner starts transactions: *pgxpool.Pool, *pgx.Conn and pgx.Tx are.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrate creates the schema of opts (Options.Schema; DefaultSchema for
// nil options or an empty Schema) and applies the migrations embedded in
// this package that it does not have yet, in one transaction. Pass it the
// Options you pass New, so that the store uses the schema that was
// migrated; it reads only Schema. It is idempotent and safe to run from
// several processes at once: an advisory lock serialises them. The `idem
// migrate` command calls it.
func Migrate(ctx context.Context, db TxBeginner, opts *Options) error {
	var schema string
	if opts != nil {
		schema = opts.Schema
	}
	return migrateTo(ctx, db, schema, math.MaxInt)
}

// migrateTo is Migrate up to version last: tests use it to build the
// schema of an older release and upgrade it.
func migrateTo(ctx context.Context, db TxBeginner, schema string, last int) error {
	if schema == "" {
		schema = DefaultSchema
	}
	if err := checkSchema(schema); err != nil {
		return err
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	slices.Sort(names)
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	steps := []string{
		`SELECT pg_advisory_xact_lock(hashtext('idem.pgstore.migrate'))`,
		`CREATE SCHEMA IF NOT EXISTS ` + schema,
		`SET LOCAL search_path TO ` + schema,
		`CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`,
	}
	for _, sql := range steps {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
	}
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("pgstore: migrate: %s: no version number: %w", base, err)
		}
		var done bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, version).Scan(&done); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		if done || version > last {
			continue
		}
		sql, err := migrations.ReadFile(name)
		if err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, string(sql)); err != nil {
			return fmt.Errorf("pgstore: migrate: %s: %w", base, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, version, base); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: commit: %w", err)
	}
	return nil
}
