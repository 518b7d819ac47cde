package pgstore

import (
	"context"
	"fmt"
)

// Pending returns the names of the migrations embedded in this package
// that the schema of opts (as Migrate reads it) has not applied, in order:
// all of them when the schema or its schema_migrations table does not
// exist, none when it is current. It only reads, so a role without the
// CREATE privilege can run it: a process that must not run DDL (idem serve
// --no-migrate) checks with it that the schema is current.
func Pending(ctx context.Context, db TxBeginner, opts *Options) ([]string, error) {
	schema := DefaultSchema
	if opts != nil && opts.Schema != "" {
		schema = opts.Schema
	}
	if err := CheckSchema(schema); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, fmt.Errorf("pgstore: pending migrations: %w: nil database", ErrConfig)
	}
	all, err := embedded()
	if err != nil {
		return nil, fmt.Errorf("pgstore: pending migrations: %w", err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: pending migrations: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema+".schema_migrations").Scan(&exists); err != nil {
		return nil, fmt.Errorf("pgstore: pending migrations: %w", err)
	}
	applied := map[int]bool{}
	if exists {
		rows, err := tx.Query(ctx, `SELECT version FROM `+schema+`.schema_migrations`)
		if err != nil {
			return nil, fmt.Errorf("pgstore: pending migrations: %w", err)
		}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return nil, fmt.Errorf("pgstore: pending migrations: %w", err)
			}
			applied[v] = true
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("pgstore: pending migrations: %w", err)
		}
	}
	var pending []string
	for _, m := range all {
		if !applied[m.version] {
			pending = append(pending, m.name)
		}
	}
	return pending, nil
}
