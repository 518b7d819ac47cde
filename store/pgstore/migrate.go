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

// CheckSchema returns the error that Migrate, Pending and New return for
// a schema name they refuse (wrapping ErrConfig), or nil: for a
// configuration checker that connects to nothing.
func CheckSchema(schema string) error {
	if !validSchema.MatchString(schema) {
		return fmt.Errorf("%w: schema %q: want lower-case letters, digits and _, at most 63, not starting with a digit", ErrConfig, schema)
	}
	return nil
}

// migration is one of the embedded migrations: migrations/NAME, whose
// name starts with its version number.
type migration struct {
	version int
	name    string
}

// embedded returns the embedded migrations in the order they apply.
func embedded() ([]migration, error) {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	all := make([]migration, len(names))
	for i, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("%s: no version number: %w", base, err)
		}
		all[i] = migration{version, base}
	}
	return all, nil
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
	if err := CheckSchema(schema); err != nil {
		return err
	}
	if db == nil {
		return fmt.Errorf("pgstore: migrate: %w: nil database", ErrConfig)
	}
	all, err := embedded()
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
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
	for _, m := range all {
		var done bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, m.version).Scan(&done); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		if done || m.version > last {
			continue
		}
		sql, err := migrations.ReadFile("migrations/" + m.name)
		if err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
		if _, err := tx.Exec(ctx, string(sql)); err != nil {
			return fmt.Errorf("pgstore: migrate: %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return fmt.Errorf("pgstore: migrate: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: commit: %w", err)
	}
	return nil
}
