package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// TestGuardDatabaseDownBeforeWorkReleases: when the guardrail's database
// cannot be reached, Guard fails before the work runs, and returns the
// driver's network error unmarked. A Do work whose only effect is Guard's
// work marks it itself, as the docs show (the work was never entered):
// the key is released, not left UNKNOWN, and the retry runs the work.
func TestGuardDatabaseDownBeforeWorkReleases(t *testing.T) {
	s := newStore(t) // the guardrail's queries; its database is reached through down
	down, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/test?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	e := memEngine(t)
	key := idem.Request{Tenant: "acme", Key: "guard-down", NoFingerprint: true}
	work := func(ctx context.Context, l *idem.Lease) ([]byte, error) {
		ran := false
		out, err := s.Guard(ctx, down, l, func(tx pgx.Tx) ([]byte, error) {
			ran = true
			t.Error("the work ran without its transaction")
			return nil, nil
		})
		if err != nil && !ran {
			return nil, idem.NotRun(err)
		}
		return out, err
	}
	for i := range 2 {
		_, _, err := e.Do(context.Background(), key, work)
		if err == nil || errors.Is(err, idem.ErrOutcomeUnknown) || !idem.Retryable(err) {
			t.Fatalf("Do %d with the guardrail's database down = %v; want its error, the key released", i+1, err)
		}
	}
}

// TestGuardBeginFailsAfterAnEffectKeepsTheKey: the work charges, then
// writes its ledger through Guard on a connection whose backend was
// terminated, so Begin fails. Guard's error says nothing of the charge
// before it: the key stays UNKNOWN, and the retry does not charge again.
// Guard marked it idem.NotRun, and Do released the key after the charge.
func TestGuardBeginFailsAfterAnEffectKeepsTheKey(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	conn, err := pgx.ConnectConfig(ctx, s.Pool().Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var ok bool // a real fault: the server ends the guardrail's backend, and waits until it is gone
	if err := s.Pool().QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, conn.PgConn().PID()).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend = %t, %v", ok, err)
	}
	e := memEngine(t)
	charges, guarded := 0, 0
	work := func(ctx context.Context, l *idem.Lease) ([]byte, error) {
		charges++ // the provider call, outside the guardrail's transaction
		out, err := s.Guard(ctx, conn, l, func(tx pgx.Tx) ([]byte, error) {
			guarded++
			return []byte("ledger"), nil
		})
		if err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
		return out, nil
	}
	key := idem.Request{Tenant: "acme", Key: "guard-begin-fails", NoFingerprint: true}
	if _, _, err := e.Do(ctx, key, work); !errors.Is(err, idem.ErrOutcomeUnknown) || idem.Retryable(err) || !strings.Contains(err.Error(), "begin") {
		t.Fatalf("Do whose Guard could not begin after the charge = %v; want an unknown outcome naming begin", err)
	}
	if _, _, err := e.Do(ctx, key, work); !errors.Is(err, idem.ErrOutcomeUnknown) || charges != 1 || guarded != 0 {
		t.Fatalf("retry = %v after %d charges, %d guarded runs; want UNKNOWN, one charge, none", err, charges, guarded)
	}
}

func memEngine(t *testing.T) *idem.Engine {
	t.Helper()
	ms, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := idem.New(ms, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Shutdown(context.Background()) })
	return e
}
