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

// NewWithReapHook is New with a function the reaper calls after each
// pass, with the rows the pass looked at and its error.
func NewWithReapHook(pool *pgxpool.Pool, opts *Options, onReap func(looked int, err error)) (*Store, error) {
	return newStore(pool, opts, onReap)
}
