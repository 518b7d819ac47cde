package natsconsumer

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
)

// Ledger is the application's database: the charges the fake provider
// made (one row each) and pgstore's guardrail reservations, in one schema
// of one PostgreSQL database, so that a charge and the reservation of its
// key commit in one transaction.
type Ledger struct {
	pool   *pgxpool.Pool
	guard  *pgstore.Store
	schema string
	// onReconcile, when set, is told what Reconcile found (tests).
	onReconcile func(key string, found bool)
	// unguarded makes Charge skip the reservation: the tests' baseline of
	// idem on Redis alone.
	unguarded bool
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// OpenLedger creates, if missing, the guardrail's tables (pgstore.Migrate)
// and the charges table in schema, and returns the ledger on them.
func OpenLedger(ctx context.Context, pool *pgxpool.Pool, schema string) (*Ledger, error) {
	if !schemaName.MatchString(schema) {
		return nil, fmt.Errorf("natsconsumer: schema %q: lower-case letters, digits and _ only", schema)
	}
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		return nil, fmt.Errorf("natsconsumer: guardrail tables: %w", err)
	}
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+schema+`.charges (
		id bigserial PRIMARY KEY,
		tenant_id text NOT NULL,
		idempotency_key text NOT NULL,
		order_id text NOT NULL,
		amount bigint NOT NULL,
		fence bigint NOT NULL,
		charged_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	if err != nil {
		return nil, fmt.Errorf("natsconsumer: charges table: %w", err)
	}
	// The guardrail only (Reserve, Settle): the engine's records are in
	// Redis, so there are no rows to reap and no reaper to stop.
	guard, err := pgstore.New(pool, &pgstore.Options{Schema: schema, ReapInterval: -1})
	if err != nil {
		return nil, err
	}
	return &Ledger{pool: pool, guard: guard, schema: schema}, nil
}

// Charge charges o for key under the lease's fence, once: in one
// transaction it reserves the key (the guardrail), makes the charge, and
// records the charge id as the reservation's outcome. If the key's charge
// is already committed it returns that charge with found true, and charges
// nothing. ctx should be the lease's context (Engine.Do passes it), so a
// lease lost before the commit rolls the charge back.
func (l *Ledger) Charge(ctx context.Context, tenant, key string, fence int64, o Order) (charge string, found bool, err error) {
	defer func() {
		// Before the COMMIT nothing is charged (the transaction rolls
		// back): the key is released. Only the COMMIT's own failure is an
		// unknown outcome.
		if err != nil && !errors.Is(err, idem.ErrOutcomeUnknown) {
			err = idem.NotRun(err)
		}
	}()
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return "", false, fmt.Errorf("natsconsumer: ledger: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if l.unguarded {
		return l.insertCharge(ctx, tx, tenant, key, fence, o)
	}
	// The reservation first: a second owner's insert waits here for an
	// open transaction on the key, and fails once that one commits.
	if err := l.guard.Reserve(ctx, tx, tenant, key, fence); err != nil {
		if !errors.Is(err, pgstore.ErrDuplicate) {
			return "", false, err
		}
		tx.Rollback(context.WithoutCancel(ctx))
		r, err := l.guard.Reservation(ctx, l.pool, tenant, key)
		if err != nil {
			return "", false, err
		}
		return string(r.Outcome), true, nil
	}
	return l.insertCharge(ctx, tx, tenant, key, fence, o)
}

// insertCharge makes the charge, settles the reservation (when guarded)
// and commits.
func (l *Ledger) insertCharge(ctx context.Context, tx pgx.Tx, tenant, key string, fence int64, o Order) (charge string, found bool, err error) {
	var id int64
	err = tx.QueryRow(ctx, `INSERT INTO `+l.schema+`.charges (tenant_id, idempotency_key, order_id, amount, fence)
		VALUES ($1, $2, $3, $4, $5) RETURNING id`, tenant, key, o.ID, o.Amount, fence).Scan(&id)
	if err != nil {
		return "", false, fmt.Errorf("natsconsumer: charge: %w", err)
	}
	charge = fmt.Sprintf("ch_%d", id)
	if !l.unguarded {
		if err := l.guard.Settle(ctx, tx, tenant, key, fence, []byte(charge)); err != nil {
			return "", false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		// A failed COMMIT may have committed: say so, and the key turns
		// UNKNOWN until Reconcile reads the ledger.
		return "", false, idem.OutcomeUnknown(fmt.Errorf("natsconsumer: commit: %w", err), "the ledger's COMMIT failed: it may have committed")
	}
	return charge, false, nil
}

// Reconcile is the idem.Options.Reconcile of a consumer on this ledger:
// for a key whose outcome is unknown (its owner's lease ended before it
// completed: the process died, or stalled), the committed reservation says
// whether the charge was made and which it was. Without one the work did
// not commit; if its transaction is still open somewhere, the next
// attempt's reservation waits for it.
func (l *Ledger) Reconcile(ctx context.Context, rec idem.Record) (idem.Resolution, error) {
	r, err := l.guard.Reservation(ctx, l.pool, rec.Tenant, rec.Key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		if l.onReconcile != nil {
			l.onReconcile(rec.Key, false)
		}
		return idem.Resolution{Verdict: idem.VerdictNotExecuted}, nil
	case err != nil:
		return idem.Resolution{}, err
	}
	if r.SettledAt.IsZero() { // Charge commits a reservation only settled: written by someone else
		return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
	}
	if l.onReconcile != nil {
		l.onReconcile(rec.Key, true)
	}
	return idem.Resolution{Verdict: idem.VerdictCompleted, Result: idem.Result{Body: r.Outcome}}, nil
}

// Charges returns how many charges each key of tenant has.
func (l *Ledger) Charges(ctx context.Context, tenant string) (map[string]int, error) {
	rows, err := l.pool.Query(ctx, `SELECT idempotency_key, count(*) FROM `+l.schema+`.charges
		WHERE tenant_id = $1 GROUP BY idempotency_key`, tenant)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	var (
		k string
		n int
	)
	_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error { out[k] = n; return nil })
	return out, err
}
