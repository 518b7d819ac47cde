package pgstore

import "github.com/jackc/pgx/v5/pgxpool"

// MigrateTo exposes migrateTo to the tests.
var MigrateTo = migrateTo

// UniqueViolation is PostgreSQL's SQLSTATE for a duplicate key, for the
// tests that check the *pgconn.PgError behind ErrDuplicate.
const UniqueViolation = uniqueViolation

// Pool returns the pool the store runs on, for the tests.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the schema that holds the store's tables, for the tests.
func (s *Store) Schema() string { return s.schema }
