package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/store"
)

// uniqueViolation is PostgreSQL's SQLSTATE for a duplicate key.
const uniqueViolation = "23505"

// Reserve inserts the reservation of (tenant, key) with the lease's fence
// into tx, the application's own transaction, before the work (the
// provider call) starts. If another transaction reserved the key and
// committed, it returns an error wrapping ErrDuplicate and the
// *pgconn.PgError (code 23505): do not run the work; the transaction is
// aborted and must be rolled back. If the other transaction is still open,
// Reserve waits for it (bound the wait with the context, or with
// lock_timeout): it fails with ErrDuplicate if that one commits, and
// succeeds if it rolls back.
//
// A reservation exists only when its transaction commits. When the work
// fails and the lease is released for a retry, roll the transaction back:
// the reservation disappears with it, and the retry reserves the key anew.
// Commit a reservation only together with the work's outcome (Settle),
// which is then final for the key.
func (s *Store) Reserve(ctx context.Context, tx pgx.Tx, tenant, key string, fence int64) error {
	if _, err := tx.Exec(ctx, s.q.reserve, tenant, key, fence); err != nil {
		return fmt.Errorf("pgstore: reserve: %w", duplicate(err))
	}
	return nil
}

// Settle records outcome on the reservation of (tenant, key), in tx, if
// fence is at least the fence that reserved it and it is not settled yet;
// otherwise it changes nothing and returns ErrStaleFence.
func (s *Store) Settle(ctx context.Context, tx pgx.Tx, tenant, key string, fence int64, outcome []byte) error {
	return FencedExec(ctx, tx, s.q.settle, tenant, key, fence, nonNil(outcome))
}

// Reservation is a committed reservation, as Store.Reservation reads it.
type Reservation struct {
	Fence      int64
	ReservedAt time.Time
	SettledAt  time.Time // zero while not settled
	Outcome    []byte    // what Settle recorded
}

// Querier runs a query: *pgxpool.Pool, *pgx.Conn and pgx.Tx are.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Reservation reads the reservation of (tenant, key): after ErrDuplicate,
// the outcome that the transaction which reserved the key recorded. It
// returns store.ErrNotFound when there is none.
func (s *Store) Reservation(ctx context.Context, q Querier, tenant, key string) (Reservation, error) {
	var (
		r       Reservation
		settled *time.Time
	)
	err := q.QueryRow(ctx, s.q.reservation, tenant, key).Scan(&r.Fence, &r.ReservedAt, &settled, &r.Outcome)
	if errors.Is(err, pgx.ErrNoRows) {
		return Reservation{}, store.ErrNotFound
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("pgstore: reservation: %w", err)
	}
	if settled != nil {
		r.SettledAt = *settled
	}
	return r, nil
}

// FencedExec runs a fenced write in tx: an UPDATE (or DELETE) of the
// application's own rows whose WHERE clause refuses a stale fence, in the
// form
//
//	UPDATE accounts SET balance = balance - $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// It returns ErrStaleFence when no row matched, an error wrapping
// ErrDuplicate on a unique violation, and other errors wrapped.
func FencedExec(ctx context.Context, tx pgx.Tx, sql string, args ...any) error {
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("pgstore: fenced write: %w", duplicate(err))
	}
	if tag.RowsAffected() == 0 {
		return ErrStaleFence
	}
	return nil
}

// duplicate joins ErrDuplicate to a unique violation, keeping the
// *pgconn.PgError reachable with errors.As.
func duplicate(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
		return fmt.Errorf("%w: %w", ErrDuplicate, err)
	}
	return err
}
