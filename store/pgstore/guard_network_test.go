package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// TestGuardDatabaseDownBeforeWorkReleases: when the guardrail's database
// cannot be reached, Guard fails before the work runs. Its error wraps the
// driver's network error, which Do reads as a call that may have been
// sent, so Guard marks it idem.NotRun: the key is released, not left
// UNKNOWN, and the retry runs the work.
func TestGuardDatabaseDownBeforeWorkReleases(t *testing.T) {
	s := newStore(t) // the guardrail's queries; its database is reached through down
	down, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/test?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	ms, err := memstore.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := idem.New(ms, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	key := idem.Request{Tenant: "acme", Key: "guard-down", NoFingerprint: true}
	work := func(ctx context.Context, l *idem.Lease) ([]byte, error) {
		return s.Guard(ctx, down, l, func(tx pgx.Tx) ([]byte, error) {
			t.Error("the work ran without its transaction")
			return nil, nil
		})
	}
	for i := range 2 {
		_, _, err := e.Do(context.Background(), key, work)
		if err == nil || errors.Is(err, idem.ErrOutcomeUnknown) || !idem.Retryable(err) {
			t.Fatalf("Do %d with the guardrail's database down = %v; want its error, the key released", i+1, err)
		}
	}
}
