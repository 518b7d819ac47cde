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
	if err := s.madeWith("reserve", tx); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.q.reserve, tenant, key, fence); err != nil {
		return fmt.Errorf("pgstore: reserve: %w", duplicate(err))
	}
	return nil
}

// Settle records outcome on the reservation of (tenant, key), in tx, if
// fence is at least the fence that reserved it and it is not settled yet;
// otherwise it changes nothing and returns ErrStaleFence.
func (s *Store) Settle(ctx context.Context, tx pgx.Tx, tenant, key string, fence int64, outcome []byte) error {
	if err := s.madeWith("settle", tx); err != nil {
		return err
	}
	return FencedExec(ctx, tx, s.q.settle, tenant, key, fence, nonNil(outcome))
}

// Lease is what the guardrail needs of the key's lease: its tenant and
// key, and its fence. *idem.Lease is one.
type Lease interface {
	ID() store.ID
	Fence() int64
}

// DB begins the guardrail's transactions and reads reservations:
// *pgxpool.Pool and *pgx.Conn are one.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Querier
}

// Guard runs work once for the lease's key, in a transaction of its own
// on db: it reserves the key with the lease's fence (Reserve), runs work
// in the transaction, records what work returned as the key's outcome
// (Settle) and commits; an error from work rolls the transaction back
// (the reservation goes with it, so a retry reserves the key anew) and is
// returned as it is, and so does a panic, which goes on. An error before
// the work ran (the database unreachable, Reserve failing) is returned
// unmarked: Guard knows nothing of what the enclosing idem work did
// before it (a charge, then Guard for the ledger), so Do keeps the key
// UNKNOWN. A Do work whose only effect is Guard's work says that nothing
// ran itself, as idem.NotRun says, from whether work was entered. The
// flow of pgx.BeginFunc, with the reservation around it:
//
//	out, err := engine.Do(ctx, key, func(ctx context.Context, l *idem.Lease) ([]byte, error) {
//		ran := false
//		out, err := pg.Guard(ctx, pool, l, func(tx pgx.Tx) ([]byte, error) {
//			ran = true
//			return charge(ctx, tx, l.Fence()) // the provider call, and the application's own writes in tx
//		})
//		if err != nil && !ran { // Guard failed before the charge, the work's one effect: nothing ran
//			return nil, idem.NotRun(err)
//		}
//		return out, err
//	})
//
// When another transaction reserved the key and committed its outcome
// (an earlier owner did the work and the idem record did not get it),
// Guard returns that outcome without running work. When the work ran and
// the commit that records it failed, the commit may have landed: Guard
// returns an error wrapping store.ErrOutcomeUnknown (idem.ErrOutcomeUnknown),
// and Do turns the key UNKNOWN, NotRun or not; a reconciliation reads the
// reservation (Store.Reservation). So does a Settle refused after the
// work ran (ErrStaleFence: a newer owner holds the key), and a key
// reserved and committed without an outcome, which Guard never commits.
func (s *Store) Guard(ctx context.Context, db DB, l Lease, work func(tx pgx.Tx) ([]byte, error)) (out []byte, err error) {
	switch err := s.made("guard"); {
	case err != nil:
		return nil, err
	case db == nil || l == nil || work == nil:
		return nil, fmt.Errorf("pgstore: guard: %w: nil database, lease or work", ErrConfig)
	}
	id, fence := l.ID(), l.Fence()
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: guard: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed { // an error, a panic: the reservation goes with the transaction
			tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := s.Reserve(ctx, tx, id.Tenant, id.Key, fence); err != nil {
		if !errors.Is(err, ErrDuplicate) {
			return nil, err
		}
		tx.Rollback(context.WithoutCancel(ctx)) // the transaction is aborted: read outside it
		r, rerr := s.Reservation(ctx, db, id.Tenant, id.Key)
		switch {
		case rerr != nil:
			return nil, fmt.Errorf("pgstore: guard: reading the reservation another transaction made: %w", rerr)
		case r.SettledAt.IsZero():
			// Reserved and committed without an outcome: Guard never
			// commits so, a hand-written flow did; whether its work ran
			// is not known.
			return nil, fmt.Errorf("%w: pgstore: guard: the key was reserved (fence %d) and committed without an outcome", store.ErrOutcomeUnknown, r.Fence)
		}
		return r.Outcome, nil
	}
	out, err = work(tx)
	if err != nil {
		return nil, err
	}
	if err := s.Settle(ctx, tx, id.Tenant, id.Key, fence, out); err != nil {
		// The work ran and its outcome cannot be recorded: never a release.
		return nil, fmt.Errorf("%w: pgstore: guard: the work ran and its outcome was not recorded: %w", store.ErrOutcomeUnknown, err)
	}
	if err := tx.Commit(ctx); err != nil {
		committed = true // nothing left to roll back: the transaction is over, one way or the other
		return nil, fmt.Errorf("%w: pgstore: guard: the work ran and its commit failed (it may have landed): %w", store.ErrOutcomeUnknown, err)
	}
	committed = true
	return out, nil
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
	if err := s.madeWith("reservation", q); err != nil {
		return Reservation{}, err
	}
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
	if tx == nil {
		return fmt.Errorf("pgstore: fenced write: %w: nil transaction", ErrConfig)
	}
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("pgstore: fenced write: %w", duplicate(err))
	}
	if tag.RowsAffected() == 0 {
		return ErrStaleFence
	}
	return nil
}

// madeWith is made, and an error for a nil transaction or querier.
func (s *Store) madeWith(op string, q any) error {
	if err := s.made(op); err != nil {
		return err
	}
	if q == nil {
		return fmt.Errorf("pgstore: %s: %w: nil transaction or querier", op, ErrConfig)
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
