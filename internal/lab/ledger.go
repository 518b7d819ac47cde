package lab

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem/store/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors of a guarded ledger.
var (
	// ErrDuplicate: the key's effect is already committed by another
	// owner; DuplicateError carries its result.
	ErrDuplicate = errors.New("lab: effect already recorded for this key")
	// ErrStaleFence: the key's effect is already committed by an owner
	// with a higher fence: this owner's lease was taken over.
	ErrStaleFence = errors.New("lab: stale fence")
)

// DuplicateError is ErrDuplicate with the result that was committed.
type DuplicateError struct{ Charge string }

func (e *DuplicateError) Error() string { return ErrDuplicate.Error() + " (" + e.Charge + ")" }

// Is reports ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// Ledger is the application's own database, where a worker records the
// effect of a request (the order row). Begin is called before the
// provider call and Commit after it.
type Ledger interface {
	// Begin opens the effect of key for the owner holding fence. A guarded
	// ledger writes its row here, before the provider is called, and
	// returns a *DuplicateError or ErrStaleFence when the key already has one.
	Begin(ctx context.Context, tenant, key string, fence int64) (Effect, error)
	// Rows returns how many committed rows each key of tenant has.
	Rows(ctx context.Context, tenant string) (map[string]int, error)
	// Committed reports the charge committed for key by the owner holding
	// fence, after a Commit that failed: its COMMIT may have landed. ok is
	// false when no such row is known (a plain ledger cannot tell).
	Committed(ctx context.Context, tenant, key string, fence int64) (charge string, ok bool)
}

// Effect is one open effect; call Commit or Abort.
type Effect interface {
	Commit(ctx context.Context, charge string) error
	Abort(ctx context.Context)
}

// pgLab is the lab's schema in PostgreSQL, created by openPG and dropped by
// close. It holds the plain ledger and pgstore's guardrail table.
type pgLab struct {
	pool   *pgxpool.Pool
	schema string
	guard  *pgstore.Store // for Reserve, Settle and Reservation only
}

func openPG(ctx context.Context, url string) (*pgLab, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("lab: PostgreSQL URL: %w", err)
	}
	cfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("lab: PostgreSQL: %w", err)
	}
	schema := "idem_lab_" + strings.ToLower(rand.Text()[:10])
	// plain: the application writes its row after the provider call, no
	// constraint. The guardrail (pgstore's reservations table, created by
	// its migrations) is the article's section 4: one row per (tenant, key),
	// written in the worker's transaction before the provider call.
	ddl := `CREATE SCHEMA ` + schema + `;
CREATE TABLE ` + schema + `.plain (tenant_id text NOT NULL, idempotency_key text NOT NULL, fence bigint NOT NULL, charge text NOT NULL);`
	if _, err := pool.Exec(ctx, ddl); err != nil {
		pool.Close()
		return nil, fmt.Errorf("lab: PostgreSQL at %s: %w", cfg.ConnConfig.Host, err)
	}
	p := &pgLab{pool: pool, schema: schema}
	if err := pgstore.Migrate(ctx, pool, &pgstore.Options{Schema: schema}); err != nil {
		p.close()
		return nil, fmt.Errorf("lab: PostgreSQL guardrail: %w", err)
	}
	// The guardrail only: no records to reap, so no reaper to stop.
	if p.guard, err = pgstore.New(pool, &pgstore.Options{Schema: schema, ReapInterval: -1}); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *pgLab) close() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	p.pool.Exec(ctx, `DROP SCHEMA `+p.schema+` CASCADE`)
	p.pool.Close()
}

// rows counts the committed rows of each key of tenant in table; done
// names the column that is set once the effect is recorded.
func (p *pgLab) rows(ctx context.Context, table, done, tenant string) (map[string]int, error) {
	rows, err := p.pool.Query(ctx, `SELECT idempotency_key, count(*) FROM `+p.schema+`.`+table+
		` WHERE tenant_id = $1 AND `+done+` IS NOT NULL GROUP BY idempotency_key`, tenant)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	var k string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error { out[k] = n; return nil })
	return out, err
}

// plainLedger records effects without any constraint, after the provider
// call: what an application without a guardrail does.
type plainLedger struct{ pg *pgLab }

func (l plainLedger) Begin(ctx context.Context, tenant, key string, fence int64) (Effect, error) {
	return plainEffect{l.pg, tenant, key, fence}, nil
}

func (l plainLedger) Rows(ctx context.Context, tenant string) (map[string]int, error) {
	return l.pg.rows(ctx, "plain", "charge", tenant)
}

type plainEffect struct {
	pg          *pgLab
	tenant, key string
	fence       int64
}

func (e plainEffect) Commit(ctx context.Context, charge string) error {
	_, err := e.pg.pool.Exec(ctx, `INSERT INTO `+e.pg.schema+`.plain VALUES ($1, $2, $3, $4)`, e.tenant, e.key, e.fence, charge)
	return err
}

func (plainEffect) Abort(context.Context) {}

func (plainLedger) Committed(context.Context, string, string, int64) (string, bool) { return "", false }

// guardLedger is the PostgreSQL guardrail of store/pgstore: the key's
// reservation is inserted in the worker's transaction before the provider
// call, so a second owner blocks on it and then sees the committed effect
// instead of charging again.
type guardLedger struct {
	pg   *pgLab
	pool *pgxpool.Pool // the workers' connections: pg.pool, or a pool through a fault proxy
}

func (l guardLedger) Rows(ctx context.Context, tenant string) (map[string]int, error) {
	return l.pg.rows(ctx, "reservations", "settled_at", tenant)
}

func (l guardLedger) Begin(ctx context.Context, tenant, key string, fence int64) (Effect, error) {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	var pid uint32
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, err
	}
	err = l.pg.guard.Reserve(ctx, tx, tenant, key, fence)
	if err == nil {
		return guardEffect{pg: l.pg, tx: tx, pid: pid, tenant: tenant, key: key, fence: fence}, nil
	}
	tx.Rollback(context.WithoutCancel(ctx))
	if !errors.Is(err, pgstore.ErrDuplicate) {
		return nil, err
	}
	res, err := l.pg.guard.Reservation(ctx, l.pool, tenant, key)
	switch {
	case err != nil:
		return nil, err
	case res.Fence > fence:
		return nil, ErrStaleFence
	case res.SettledAt.IsZero():
		return nil, errors.New("lab: reservation committed without an outcome")
	}
	return nil, &DuplicateError{Charge: string(res.Outcome)}
}

func (l guardLedger) Committed(ctx context.Context, tenant, key string, fence int64) (string, bool) {
	res, err := l.pg.guard.Reservation(ctx, l.pg.pool, tenant, key)
	if err != nil || res.Fence != fence || res.SettledAt.IsZero() {
		return "", false
	}
	return string(res.Outcome), true
}

type guardEffect struct {
	pg  *pgLab
	tx  pgx.Tx
	pid uint32 // the backend serving tx, for the pg-kill scenario
	// atCommit, when not nil, is called around the COMMIT (true before,
	// false after), for the pg-lost-commit scenario.
	atCommit    func(before bool)
	tenant, key string
	fence       int64
}

func (e guardEffect) Commit(ctx context.Context, charge string) error {
	if err := e.pg.guard.Settle(ctx, e.tx, e.tenant, e.key, e.fence, []byte(charge)); err != nil {
		e.tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if e.atCommit != nil {
		e.atCommit(true)
		defer e.atCommit(false)
	}
	return e.tx.Commit(ctx)
}

func (e guardEffect) Abort(ctx context.Context) { e.tx.Rollback(context.WithoutCancel(ctx)) }
